"""The session object's two shapes: OpenAI Realtime GA (``type: realtime``, turn detection and
formats under ``session.audio``, fdb's ``sglang`` extension object) and beta (flat
``turn_detection``, ``modalities``, named audio formats). A shape builds the client's
session.update body and reads back what a session.updated declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fdb.dialects.views import at

if TYPE_CHECKING:  # the Dialect record refers to its shape: typing only, no import cycle
    from fdb.dialects.model import Dialect


class Shape:
    name: str
    names_model = False  # session.update carries the model (a mismatch is the server's error)

    def update_body(
        self,
        dialect: Dialect,
        turn_detection: dict[str, Any] | None,
        model: str | None,
        instructions: str | None,
        sglang: dict[str, Any] | None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def noop_update(self) -> dict[str, Any]:
        """The --legacy-tail session.update: changes nothing; its answer proves liveness."""
        raise NotImplementedError

    def without_turn_detection(self, body: dict[str, Any]) -> None:
        """Set turn_detection to null in ``body``, where the shape puts it."""
        raise NotImplementedError

    def echoed_turn_detection(self, session: dict[str, Any] | None) -> dict[str, Any] | None:
        """The turn_detection a session.updated's ``session`` reports."""
        raise NotImplementedError

    def declared_output_rate(self, session: dict[str, Any] | None) -> int | str | None:
        """The output rate a session.updated declares; None when it declares none."""
        raise NotImplementedError

    def wrong_24k_input(self, session: dict[str, Any]) -> str | None:
        """What a session.updated declares about the input format when it is wrong for 24 kHz
        PCM16 (None when it is right or says nothing)."""
        raise NotImplementedError


class Ga(Shape):
    name = "ga"
    names_model = True

    def update_body(
        self,
        dialect: Dialect,
        turn_detection: dict[str, Any] | None,
        model: str | None,
        instructions: str | None,
        sglang: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """``type: realtime``, turn detection and formats under ``audio``; ``sglang`` holds the
        session settings' fields, and a dialect that asks for its unit adds
        ``timebase.native_unit_ms``."""
        body: dict[str, Any] = {"type": "realtime"}
        if model:
            body["model"] = model
        if instructions:
            body["instructions"] = instructions
        audio: dict[str, Any] = {}
        if turn_detection is not None:
            audio["input"] = {"turn_detection": dict(turn_detection)}
        if dialect.formats.declared:
            audio.setdefault("input", {})["format"] = {
                "type": "audio/pcm",
                "rate": dialect.formats.input_rate,
            }
            audio["output"] = {"format": {"type": "audio/pcm", "rate": dialect.formats.output_rate}}
        if audio:
            body["audio"] = audio
        extension = dict(sglang or {})
        if dialect.units.requested:
            extension["timebase"] = {"native_unit_ms": dialect.units.unit_ms}
        if dialect.client.requests_extensions or extension:
            body["sglang"] = extension
        return body

    def noop_update(self) -> dict[str, Any]:
        return {"type": "realtime"}

    def without_turn_detection(self, body: dict[str, Any]) -> None:
        body.setdefault("audio", {}).setdefault("input", {})["turn_detection"] = None

    def echoed_turn_detection(self, session: dict[str, Any] | None) -> dict[str, Any] | None:
        if not isinstance(session, dict):
            return None
        found = at(session, "audio", "input", "turn_detection")
        return found if isinstance(found, dict) else None

    def declared_output_rate(self, session: dict[str, Any] | None) -> int | str | None:
        """audio.output.format.rate."""
        if not isinstance(session, dict):
            return None
        return at(session, "audio", "output", "format", "rate")

    def wrong_24k_input(self, session: dict[str, Any]) -> str | None:
        rate = at(session, "audio", "input", "format", "rate")
        return None if rate in (None, 24000) else f"session.updated declares input rate {rate}"


class Beta(Shape):
    name = "beta"

    def update_body(
        self,
        dialect: Dialect,
        turn_detection: dict[str, Any] | None,
        model: str | None,
        instructions: str | None,
        sglang: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Flat ``turn_detection`` and ``modalities``; no model, no extension object."""
        body: dict[str, Any] = {"modalities": ["text", "audio"]}
        if instructions:
            body["instructions"] = instructions
        if turn_detection is not None:
            body["turn_detection"] = dict(turn_detection)
        if dialect.formats.declared:
            body["input_audio_format"] = body["output_audio_format"] = "pcm16"
        return body

    def noop_update(self) -> dict[str, Any]:
        return {}

    def without_turn_detection(self, body: dict[str, Any]) -> None:
        body["turn_detection"] = None

    def echoed_turn_detection(self, session: dict[str, Any] | None) -> dict[str, Any] | None:
        if not isinstance(session, dict):
            return None
        found = session.get("turn_detection")
        return found if isinstance(found, dict) else None

    def declared_output_rate(self, session: dict[str, Any] | None) -> int | str | None:
        """The ``output_audio_format`` name, where ``pcm16`` means 24 kHz."""
        if not isinstance(session, dict):
            return None
        fmt = session.get("output_audio_format")
        return None if fmt is None else 24000 if fmt == "pcm16" else str(fmt)

    def wrong_24k_input(self, session: dict[str, Any]) -> str | None:
        fmt = session.get("input_audio_format")
        return (
            None
            if fmt in (None, "pcm16")
            else f"session.updated declares input_audio_format {fmt!r}"
        )


SHAPES: dict[str, Shape] = {shape.name: shape for shape in (Ga(), Beta())}
