"""`python -m fdb tts-bench`: TTS serving and quality on Seed-TTS against /v1/audio/speech."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import typer
from rich.console import Console
from rich.table import Table

from fdb.errors import FdbError
from runs.options import revision_option

if TYPE_CHECKING:
    from fdb.records.tts import TtsReport

HELP = (
    "Replay a Seed-TTS list against POST /v1/audio/speech (--url, or the bundled server started "
    "here) at each --concurrency level entry in turn (--rounds times each, after a cold round "
    "with --rounds >= 2), closed loop, warm-ups excluded; then score serving metrics per level "
    "entry (TTFA p50/p95/mean, RTF mean, throughput in audio-s/s and, with --frame-rate, "
    "frames/s, gaps, underruns, stop-condition violations) and quality on the first entry's audio "
    "(Seed-TTS WER, SIM to the prompt wav, MOS), and write DIR/TTS.md, DIR/tts.json, "
    "DIR/tables/*.csv and DIR/plots/tts-concurrency.png. Before the first request it asks the "
    "server what it is (GET /v1/realtime/capabilities, /v1/models, /health; missing ones give "
    "nulls) and records that with --server-revision, --model-revision and --dataset-revision in "
    "run.json and TTS.md's header. Definitions: docs/tts.md."
)


def _json_object(text: str | None, option: str) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FdbError(
            f"{option} is not JSON: {exc}", f"pass e.g. {option} '{{\"max_new_tokens\": 2048}}'"
        ) from exc
    if not isinstance(value, dict):
        raise FdbError(
            f"{option} must be a JSON object", f"pass e.g. {option} '{{\"max_new_tokens\": 2048}}'"
        )
    return value


def _base_url(url: str | None) -> str | None:
    """--url is the server's base, http(s)://HOST:PORT: anything else would fail every request."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FdbError(
            f"--url {url!r} is not http(s)://HOST:PORT",
            "pass the server's base URL, e.g. --url http://127.0.0.1:8000 (fdb adds "
            "/v1/audio/speech)",
        )
    return url


def _choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    if value not in allowed:
        raise FdbError(
            f"{option} {value!r} is not one of {', '.join(allowed)}", f"pass {option} {allowed[0]}"
        )
    return value


def tts_bench(
    output: Path = typer.Option(
        ..., help="Run directory: concurrency-N/ per level entry, quality/, tts.json, TTS.md."
    ),
    concurrency: str = typer.Option(
        "1,2,4,8",
        help="Level entries, in order, separated by commas and/or spaces "
        "(quote them): requests in flight at once, e.g. 1,2,4,8 or '64 64 128' "
        "(repeats allowed, each entry recorded apart).",
    ),
    rounds: int = typer.Option(
        1,
        min=1,
        help="Measured rounds per level entry; its row is the mean over them, shown ± their sd.",
    ),
    cold_round: bool | None = typer.Option(
        None,
        "--cold-round/--no-cold-round",
        help="Record one more round "
        "before each entry's measured rounds, shown apart and left out of the "
        "mean. Default: on when --rounds >= 2, off otherwise.",
    ),
    num_prompts: int = typer.Option(
        8, min=1, help="Measured requests per level: the list's first N rows (cycled when shorter)."
    ),
    num_warmups: int = typer.Option(
        1, min=0, help="Warm-up requests before each level (the first rows again), excluded."
    ),
    url: str | None = typer.Option(
        None, help="http://HOST:PORT of the server; without it the bundled server is started."
    ),
    system: str = typer.Option(
        "embedded-cascade", help="Bundled system to start when --url is not given."
    ),
    seed_tts: Path | None = typer.Option(
        None,
        help="seedtts_testset/ root (default $SEED_TTS_DATASET, the linked one, else the synthetic "
        "list).",
    ),
    list_name: str = typer.Option(
        "en/meta.lst", "--list", help="Which list: en/meta.lst, zh/meta.lst or zh/hardcase.lst."
    ),
    model: str | None = typer.Option(
        None, help="model sent in the body (left out when not given)."
    ),
    stream_format: str = typer.Option(
        "audio", help="audio (raw PCM bytes) or sse (speech.audio.delta events)."
    ),
    transport: str = typer.Option(
        "http",
        help="http (POST /v1/audio/speech) or realtime (one /v1/realtime session per request, GA "
        "events; needs --url).",
    ),
    ref_audio: str = typer.Option(
        "inline",
        help="inline (data:audio/wav;base64), file (file:// URI; the server needs the dataset "
        "path) or none.",
    ),
    extra_body: str | None = typer.Option(
        None,
        help='JSON merged into every body, e.g. \'{"task_type": "Base", "max_new_tokens": 2048}\'.',
    ),
    sample_rate: int | None = typer.Option(
        None, help="Rate to use ONLY when the server declares none (otherwise such requests fail)."
    ),
    channels: int | None = typer.Option(
        None, help="Channel count to use only when the server declares none (default 1)."
    ),
    frame_rate: float | None = typer.Option(
        None, help="The model's codec frame rate in Hz (e.g. 21.5, 12.5): adds frames/s."
    ),
    max_audio_s: float | None = typer.Option(
        None,
        help="Stop-condition bound: audio beyond it is a violation (0: the request must return no "
        "audio).",
    ),
    playback_reserve_ms: float = typer.Option(
        80.0, help="Startup buffer of the simulated player: a request needing more underruns."
    ),
    timeout_s: float = typer.Option(120.0, help="Per-request timeout."),
    api_key_env: str | None = typer.Option(
        None,
        help="Name of the environment variable holding the server's bearer token (e.g. "
        "OPENAI_API_KEY); sent as Authorization, never written anywhere.",
    ),
    server_revision: str | None = typer.Option(
        None,
        help="Source revision of the server (e.g. $(git rev-parse HEAD) of its checkout): recorded "
        "as given in run.json, tts.json and TTS.md's header.",
    ),
    model_revision: str | None = typer.Option(
        None,
        help="Revision of the served TTS model (e.g. its Hugging Face snapshot): recorded as "
        "given.",
    ),
    dataset_revision: str | None = typer.Option(
        None,
        help="Revision label of the Seed-TTS test set: recorded as given beside the list's sha256.",
    ),
    quality: bool = typer.Option(
        True, help="Score WER/SIM/MOS on the first entry's audio (its first measured round)."
    ),
    asr_model: str | None = typer.Option(
        None,
        help="Local CTranslate2 Whisper-large-v3 directory (else the embedded tiny.en, labeled).",
    ),
    asr_model_sha256: str | None = typer.Option(None, help="sha256 of --asr-model's model.bin."),
    speaker_checkpoint: str | None = typer.Option(
        None, help="Local WavLM-large ECAPA TorchScript file (else resemblyzer, a proxy)."
    ),
    speaker_sha256: str | None = typer.Option(None, help="sha256 of --speaker-checkpoint."),
    utmos_checkpoint: str | None = typer.Option(
        None, help="Local UTMOS TorchScript file (else DNSMOS, labeled)."
    ),
    utmos_sha256: str | None = typer.Option(None, help="sha256 of --utmos-checkpoint."),
    sim: bool = typer.Option(True, help="Speaker similarity to the prompt wav."),
    mos: bool = typer.Option(True, help="MOS of each generated wav."),
    report_only: bool = typer.Option(
        False, help="Rebuild tts.json/TTS.md/CSV/plot from an existing --output (no requests)."
    ),
) -> None:
    """Record, score and report. Times are client-side; a level's failures are part of its
    result."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.records.tts import QualityOptions, TtsBenchOptions
    from runs.tts_bench import bench, build_report, parse_concurrency

    console = Console(stderr=True)
    if report_only:
        report = build_report(output)
    else:
        opts = TtsBenchOptions(
            output=output,
            concurrency=parse_concurrency(concurrency),
            rounds=rounds,
            cold_round=cold_round,
            num_prompts=num_prompts,
            num_warmups=num_warmups,
            url=_base_url(url),
            system=system,
            dataset_root=seed_tts,
            list_name=list_name,
            model=model,
            stream_format=_choice(stream_format, ("audio", "sse"), "--stream-format"),
            transport=_choice(transport, ("http", "realtime"), "--transport"),
            ref_audio=_choice(ref_audio, ("inline", "file", "none"), "--ref-audio"),
            extra_body=_json_object(extra_body, "--extra-body"),
            sample_rate=sample_rate,
            channels=channels,
            frame_rate=frame_rate,
            max_audio_s=max_audio_s,
            playback_reserve_ms=playback_reserve_ms,
            timeout_s=timeout_s,
            api_key_env=api_key_env,
            server_revision=revision_option(server_revision, "--server-revision"),
            model_revision=revision_option(model_revision, "--model-revision"),
            dataset_revision=revision_option(dataset_revision, "--dataset-revision"),
            quality=QualityOptions(
                enabled=quality,
                asr_model=asr_model,
                asr_model_sha256=asr_model_sha256,
                speaker_checkpoint=speaker_checkpoint,
                speaker_sha256=speaker_sha256,
                utmos_checkpoint=utmos_checkpoint,
                utmos_sha256=utmos_sha256,
                sim=sim,
                mos=mos,
            ),
        )
        report = bench(opts, console)
    console.print(summary_table(report))
    console.print(f"wrote {output / 'TTS.md'}")
    requests = sum(row.requests for row in report.rows)
    if requests and sum(row.failed for row in report.rows) == requests:
        first = next((row.errors[0] for row in report.rows if row.errors), None)

        raise FdbError(
            f"every one of the {requests} measured requests failed, so {output / 'TTS.md'} "
            "measures nothing" + (f" (first error: {first})" if first else ""),
            "check that --url answers POST /v1/audio/speech (curl it), and the server's log",
        )
    empty = _levels_without_success(report)
    if empty:
        console.print(
            f"ERROR: {'; '.join(empty)}, so those rows of {output / 'TTS.md'} measure nothing (the "
            "server's log says why)",
            highlight=False,
            soft_wrap=True,
        )
        raise SystemExit(1)


def _levels_without_success(report: TtsReport) -> list[str]:
    """Each level entry none of whose measured requests returned audio (ok alone counts with
    --max-audio-s 0, where no audio is the right answer), as one clause with its first error."""
    silent_ok = report.run.options.max_audio_s == 0
    found = []
    for entry, row in enumerate(report.rows, start=1):
        if row.requests and (row.ok if silent_ok else row.ok - row.empty) == 0:
            why = f"first error: {row.errors[0]}" if row.errors else "no request returned audio"
            found.append(
                f"concurrency {row.concurrency} (entry {entry}): none of its {row.requests} "
                f"measured requests succeeded ({why})"
            )
    return found


def summary_table(report: TtsReport):
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from reports.tts import serving_table

    columns, lines = serving_table(report)
    table = Table(*columns, "Failed", "Stop violations", title="TTS serving (client-side)")
    for row, cells in lines:
        stops = "-" if row.stop_checked == 0 else f"{row.stop_violations}/{row.stop_checked}"
        table.add_row(*cells, f"{row.failed}/{row.requests}", stops)
    q = report.quality
    if q is not None and q.wer_mean_pct is not None:
        table.caption = (
            f"WER {q.wer_mean_pct:.2f}% (corpus {q.wer_corpus_pct:.2f}%, {q.asr_label}); "
            f"SIM {q.sim_mean}; MOS {q.mos_mean}"
        )
    return table


def register(app: typer.Typer) -> None:
    app.command(
        "tts-bench",
        help=HELP,
        short_help="TTS serving and quality on Seed-TTS against /v1/audio/speech.",
    )(tts_bench)
