"""How a speech server's answer is read: its Content-Type, its rate and channel headers, a WAV
header that arrives in pieces, and the text of an error quoted without its payload. One reading
for fdb's TTS client (``recorders.tts_client``) and the cascade's ``openai_speech`` node
(``serving.service_nodes``).

Raw PCM16 (little-endian unless declared otherwise), by Content-Type (parameters ignored in the
match, case-insensitive): ``audio/pcm``, ``audio/pcm_s16le`` (``_s16be``: big-endian),
``audio/s16le``, ``audio/l16`` (read little-endian, as the servers that send it do, e.g.
Gemini's ``audio/L16;rate=24000``; ``endianness=big-endian`` is honoured), ``audio/x-raw``
(GStreamer caps: ``format=S16LE`` or ``S16BE`` when given, anything else refused),
``audio/raw``, ``audio/x-pcm``, ``application/octet-stream``. The rate is the ``X-Sample-Rate``
header, else the Content-Type's ``rate=`` (or ``samplerate=``/``sample_rate=``); channels
``X-Channels`` else ``channels=``; the sample size ``X-Bit-Depth`` (bits) or ``X-Sample-Width``
(bytes) must be 16 bits when sent.

WAV (``audio/wav``, ``audio/x-wav``, ``audio/wave``, ``audio/vnd.wave``): :class:`WavStream`
parses the RIFF header as it arrives; a ``data`` size of 0 or 0xFFFFFFFF (a stream of unknown
length) runs to the end of the body, a real size ends the payload there (later chunks are
skipped), and a second RIFF header right after a data chunk starts the next concatenated WAV.

SSE (``text/event-stream``) is framed by the reader that asked for it.

:func:`server_text` is the only way a server's body reaches a message: decoded as UTF-8, binary
(undecodable, or with control characters such as the NULs of PCM silence) shown as its length
only, base64 runs shortened, folded onto one line and cut to a bound.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from fdb.io import one_line

RAW_TYPES = (
    "audio/pcm",
    "audio/pcm_s16le",
    "audio/pcm_s16be",
    "audio/s16le",
    "audio/s16be",
    "audio/l16",
    "audio/x-raw",
    "audio/raw",
    "audio/x-pcm",
    "application/octet-stream",
)
WAV_TYPES = ("audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave")
SSE_TYPE = "text/event-stream"
Kind = Literal["pcm", "wav", "sse"]
RATE_PARAMS = ("rate", "samplerate", "sample_rate")
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{64,}={0,2}")
UNKNOWN_SIZES = (0, 0xFFFFFFFF)


class FormatError(ValueError):
    """An answer whose audio cannot be read as declared; the message names what and why."""


_SEPARATORS = re.compile(r"[;,]")  # ";" in HTTP; "," in GStreamer caps (audio/x-raw, rate=16000)


def media_type(content_type: str | None) -> str:
    """``audio/L16; rate=24000`` -> ``audio/l16``."""
    return _SEPARATORS.split(content_type or "")[0].strip().lower()


def kind(content_type: str | None) -> Kind | None:
    """pcm, wav or sse by the Content-Type; None for anything else (JSON, HTML, MP3, ...)."""
    base = media_type(content_type)
    if base == SSE_TYPE:
        return "sse"
    if base in WAV_TYPES:
        return "wav"
    if base in RAW_TYPES:
        return "pcm"
    return None


def param(content_type: str | None, *names: str) -> str | None:
    """The first of ``names`` among the Content-Type's parameters (case-insensitive, unquoted;
    GStreamer's typed values such as ``(int)16000`` read as ``16000``)."""
    wanted = {name.lower() for name in names}
    for part in _SEPARATORS.split(content_type or "")[1:]:
        key, _, value = part.strip().partition("=")
        if key.strip().lower() in wanted:
            return re.sub(r"^\(\w+\)", "", value.strip().strip('"'))
    return None


def positive_int(value: str | None, what: str) -> int | None:
    """``value`` as a positive integer; None when absent or empty."""
    if value is None or str(value).strip() == "":
        return None
    try:
        number = int(float(value))
    except (ValueError, OverflowError):  # "x", "nan"; "inf", "1e999"
        raise FormatError(f"{what} {server_text(str(value), 40)!r} is not a number") from None
    if number <= 0:
        raise FormatError(f"{what} {server_text(str(value), 40)!r} is not positive")
    return number


RATES = (8000, 192000)  # the sample rates an answer may declare (a speech node's sample_rate range)


def sample_rate(rate: int | None, what: str) -> int | None:
    """``rate`` when it is a plausible audio sample rate (8 to 192 kHz), else FormatError: a
    server's ``X-Sample-Rate: 1`` would otherwise be resampled into 24,000 times its samples."""
    if rate is not None and not RATES[0] <= rate <= RATES[1]:
        raise FormatError(
            f"{what} {rate} Hz is not an audio sample rate ({RATES[0]} to {RATES[1]} Hz)"
        )
    return rate


@dataclass(frozen=True)
class RawFormat:
    """What a raw-PCM answer declares; None where it declares nothing."""

    rate: int | None
    channels: int | None
    rate_source: Literal["header", "content-type"] | None
    big_endian: bool = False


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def sample_bits(headers: Mapping[str, str]) -> int:
    """16, or FormatError for an X-Bit-Depth / X-Sample-Width that says otherwise."""
    bits = positive_int(_header(headers, "x-bit-depth"), "X-Bit-Depth")
    width = positive_int(_header(headers, "x-sample-width"), "X-Sample-Width")
    if bits is not None and bits != 16:
        raise FormatError(f"X-Bit-Depth is {bits}; only 16-bit PCM is supported")
    if width is not None and width != 2:
        raise FormatError(f"X-Sample-Width is {width} bytes; only 16-bit (2-byte) PCM is supported")
    return 16


def raw_format(headers: Mapping[str, str], content_type: str | None) -> RawFormat:
    """The rate, channels and byte order a raw-PCM answer declares (see the module's text)."""
    ctype = content_type or ""
    base = media_type(ctype)
    sample_bits(headers)
    big = base.endswith("be")
    if base == "audio/x-raw":
        encoding = (param(ctype, "format") or "S16LE").upper()
        if encoding not in ("S16LE", "S16BE"):
            raise FormatError(
                f"audio/x-raw format={encoding}; only S16LE/S16BE (16-bit PCM) is supported"
            )
        big = encoding == "S16BE"
    if base == "audio/l16":
        big = (param(ctype, "endianness", "endian") or "").lower().startswith("big")
    rate = sample_rate(
        positive_int(_header(headers, "x-sample-rate"), "X-Sample-Rate"), "X-Sample-Rate"
    )
    source: Literal["header", "content-type"] | None = "header" if rate else None
    if rate is None:
        rate = sample_rate(
            positive_int(param(ctype, *RATE_PARAMS), "the Content-Type rate"),
            "the Content-Type rate",
        )
        source = "content-type" if rate else None
    channels = positive_int(_header(headers, "x-channels"), "X-Channels") or positive_int(
        param(ctype, "channels"), "the Content-Type channels"
    )
    return RawFormat(rate=rate, channels=channels, rate_source=source, big_endian=big)


def little_endian(pcm: bytes, big_endian: bool) -> bytes:
    """PCM16 bytes in little-endian order (swapped when the server sent big-endian)."""
    if not big_endian:
        return pcm
    data = bytearray(pcm[: len(pcm) // 2 * 2])
    data[0::2], data[1::2] = data[1::2], data[0::2]
    return bytes(data)


class WavStream:
    """Payload bytes of a WAV body fed in arbitrary pieces. ``rate``, ``channels`` and ``bits``
    are set once a ``fmt `` chunk is read; ``started`` once payload began."""

    def __init__(self) -> None:
        self.rate: int | None = None
        self.channels: int | None = None
        self.bits: int | None = None
        self.started = False
        self._buffer = bytearray()
        self._left: int | None = (
            None  # payload bytes left in the current data chunk (None: to the end)
        )
        self._in_data = False
        self._after_data = False  # a sized data chunk ended: skip, unless a new RIFF header follows
        self._skipping = False  # trailing chunks after the last data chunk: the rest is not audio

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        while data and not self._skipping:
            if self._in_data:
                if self._left is None:
                    out += data
                    return bytes(out)
                take = data[: self._left]
                out += take
                self._left -= len(take)
                data = data[len(take) :]
                if self._left == 0:
                    self._in_data, self._after_data = False, True
                continue
            self._buffer += data
            data = b""
            if self._after_data:
                if len(self._buffer) < 4:
                    break
                if bytes(self._buffer[:4]) != b"RIFF":  # trailing chunks (LIST, ...): not audio
                    self._buffer.clear()
                    self._skipping = True
                    break
                self._after_data = False
            payload = self._header()
            if payload is not None:
                data = payload
        return bytes(out)

    def _header(self) -> bytes | None:
        """Parse the buffered header; the bytes after the data chunk's header once it is
        complete."""
        buf = self._buffer
        if len(buf) < 12:
            return None
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise FormatError("the audio/wav answer does not start with a RIFF/WAVE header")
        pos = 12
        while len(buf) >= pos + 8:
            chunk, size = (
                bytes(buf[pos : pos + 4]),
                int.from_bytes(buf[pos + 4 : pos + 8], "little"),
            )
            if chunk == b"data":
                if self.rate is None:
                    raise FormatError("the WAV answer has no fmt chunk before its data")
                rest = bytes(buf[pos + 8 :])
                self._buffer = bytearray()
                self._in_data, self.started = True, True
                self._left = None if size in UNKNOWN_SIZES else size
                return rest
            if len(buf) < pos + 8 + size:
                return None
            if chunk == b"fmt ":
                self._fmt(bytes(buf[pos + 8 : pos + 8 + size]))
            pos += 8 + size + (size & 1)
        return None

    def _fmt(self, chunk: bytes) -> None:
        fmt, channels = int.from_bytes(chunk[0:2], "little"), int.from_bytes(chunk[2:4], "little")
        rate, bits = int.from_bytes(chunk[4:8], "little"), int.from_bytes(chunk[14:16], "little")
        if fmt not in (1, 0xFFFE) or bits != 16:
            raise FormatError(
                f"the WAV answer is format {fmt} at {bits} bits; only PCM16 is supported"
            )
        if self.rate is not None and (rate, channels) != (self.rate, self.channels):
            raise FormatError(
                f"a concatenated WAV changed format ({self.rate} Hz x {self.channels} -> "
                f"{rate} Hz x {channels})"
            )
        if rate <= 0 or channels <= 0:
            raise FormatError(f"the WAV answer declares {rate} Hz and {channels} channels")
        sample_rate(rate, "the WAV answer's rate")
        self.rate, self.channels, self.bits = rate, channels, bits


def is_text(body: bytes) -> bool:
    """Whether ``body`` is UTF-8 text without control characters (not audio, not binary)."""
    try:
        return not _BINARY.search(body.decode("utf-8"))
    except UnicodeDecodeError:
        return False


def server_text(body: bytes | str | None, limit: int = 200) -> str:
    """A server's body made fit for a message: never payload bytes (see the module's text). A
    body in bytes that is not text is shown as its length only; a message (str) that holds binary
    (control characters, U+FFFD from a lenient decode, as an older record may) is cut there."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        if not is_text(body):
            return f"<{len(body)} bytes, not text>"
        text = body.decode("utf-8")
    else:
        text = body
        found = _BINARY.search(text.replace("\ufffd", "\x00"))
        if found:
            text = (
                text[: found.start()]
                + f"<{len(text) - found.start()} characters of binary data, not shown>"
            )
    text = _BASE64_RUN.sub(lambda m: f"<{len(m.group())} base64 characters>", text)
    return one_line(text, limit)
