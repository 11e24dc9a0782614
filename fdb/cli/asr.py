"""`python -m fdb asr`: transcribe and score a recorded repeat."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from fdb.cli import configure_logging
from fdb.errors import FdbError


def _refuse_stray(kind: str, name: str | None, given: dict) -> None:
    """A checkpoint or endpoint option without the backend it belongs to is a mistake, not a
    no-op."""
    stray = [flag for flag, value in given.items() if value is not None]
    if name is None and stray:
        example = {"asr": "parakeet", "mos": "utmos", "speaker": "wavlm-ecapa"}[kind]
        raise FdbError(
            f"{stray[0]} is given without --{kind}",
            f"name the backend it belongs to, e.g. --{kind} {example}",
        )


def asked_backends(
    asr: str | None,
    nemo: Path | None,
    nemo_sha256: str | None,
    device: str | None,
    asr_url: str | None,
    asr_model: str | None,
    api_key_env: str | None,
    mos: str | None,
    utmos_checkpoint: Path | None,
    utmos_sha256: str | None,
    speaker: str | None,
    speaker_checkpoint: Path | None,
    speaker_sha256: str | None,
) -> dict:
    """kind -> BackendChoice for every backend the options name (the others stay the run's)."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.models.scoring import choose

    _refuse_stray(
        "asr",
        asr,
        {
            "--nemo": nemo,
            "--nemo-sha256": nemo_sha256,
            "--asr-url": asr_url,
            "--asr-model": asr_model,
            "--api-key-env": api_key_env,
        },
    )
    _refuse_stray(
        "mos", mos, {"--utmos-checkpoint": utmos_checkpoint, "--utmos-sha256": utmos_sha256}
    )
    _refuse_stray(
        "speaker",
        speaker,
        {"--speaker-checkpoint": speaker_checkpoint, "--speaker-sha256": speaker_sha256},
    )
    asked = {}
    if asr is not None:
        asked["asr"] = choose(
            "asr",
            asr,
            nemo,
            nemo_sha256,
            device=device,
            url=asr_url,
            model=asr_model,
            api_key_env=api_key_env,
        )
    if mos is not None:
        asked["mos"] = choose("mos", mos, utmos_checkpoint, utmos_sha256)
    if speaker is not None:
        asked["speaker"] = choose("speaker", speaker, speaker_checkpoint, speaker_sha256)
    return asked


def asr(
    run_name: str = typer.Option(..., help="The run: $FDB_WORK/runs/RUN_NAME."),
    repeat: int = typer.Option(1, help="Which repeat-N/ to score."),
    asr: str | None = typer.Option(
        None,
        "--asr",
        help="ASR backend: faster-whisper (embedded Whisper tiny.en), "
        "parakeet (--nemo) or openai-compatible (--asr-url, --asr-model). Default: the "
        "run's (run.json scoring), else faster-whisper.",
    ),
    nemo: Path | None = typer.Option(
        None, help="parakeet: the local parakeet-tdt-0.6b-v2 .nemo checkpoint."
    ),
    nemo_sha256: str | None = typer.Option(
        None, help="parakeet: its expected sha256 (default: the pinned d99e3995…)."
    ),
    device: str | None = typer.Option(
        None, help="parakeet: cpu (default) or cuda with exactly one visible GPU."
    ),
    asr_url: str | None = typer.Option(None, help="openai-compatible: base URL ending in /v1."),
    asr_model: str | None = typer.Option(
        None, help="openai-compatible: the model name to request."
    ),
    api_key_env: str | None = typer.Option(
        None,
        help="openai-compatible: the variable holding the key (default "
        "OPENAI_API_KEY; EMPTY for none); only its name is recorded.",
    ),
    mos: str | None = typer.Option(
        None,
        help="MOS backend: dnsmos (embedded DNSMOS OVRL) or utmos "
        "(--utmos-checkpoint, --utmos-sha256). Default: the run's, else dnsmos.",
    ),
    utmos_checkpoint: Path | None = typer.Option(
        None, help="utmos: the local UTMOS TorchScript file."
    ),
    utmos_sha256: str | None = typer.Option(
        None, help="utmos: its sha256, checked before loading."
    ),
    speaker: str | None = typer.Option(
        None,
        help="Speaker backend for voice similarity: resemblyzer (embedded) "
        "or wavlm-ecapa (--speaker-checkpoint, --speaker-sha256). Default: the "
        "run's, else resemblyzer.",
    ),
    speaker_checkpoint: Path | None = typer.Option(
        None, help="wavlm-ecapa: the local WavLM-large ECAPA TorchScript file."
    ),
    speaker_sha256: str | None = typer.Option(
        None, help="wavlm-ecapa: its sha256, checked before loading."
    ),
    side_by_side: bool = typer.Option(
        False,
        help="Score with backends other than the run's: the outputs go to "
        "repeat-N/scoring/<asr>+<mos>+<speaker>/ (v10/reference, reference-audio, "
        "listening); the run's own outputs, and RESULTS.md, stay as they are.",
    ),
    retry_failed: bool = typer.Option(
        False, help="Transcribe again the samples whose ASR failed before."
    ),
    log_level: str = typer.Option("warning", help="debug, info, warning or error."),
) -> None:
    """Transcribe the v1.0 windows with word timestamps (official output.json schema,
    interruption samples cut at the interruption end), write the unified v1.0 metrics
    (unified.json, unified-samples.jsonl) and the official-rule reference numbers (official.json),
    time the v1.5 windows with Silero VAD (scores/summary.json), transcribe them, and score the
    listening quality of every reply (listening/).

    Backends are chosen once per run: the first asr of a run records its --asr, --mos and
    --speaker choice (checkpoint paths and sha256s, never a key) in run.json, and every later asr
    of the run (any repeat) uses it when the options are left out, so finished samples are kept.
    Defaults: faster-whisper, dnsmos, resemblyzer (a run scored before fdb recorded the choice
    counts as scored with these). Asking for another backend than the run's stops with an error
    before anything is written, unless --side-by-side; an output already on disk from another
    model is never overwritten or mixed. A failing step prints the command that continues it.
    """
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from runs.phases import run_asr

    configure_logging(log_level)
    asked = asked_backends(
        asr,
        nemo,
        nemo_sha256,
        device,
        asr_url,
        asr_model,
        api_key_env,
        mos,
        utmos_checkpoint,
        utmos_sha256,
        speaker,
        speaker_checkpoint,
        speaker_sha256,
    )
    if not run_asr(
        run_name,
        repeat,
        Console(stderr=True),
        retry_failed=retry_failed,
        asked=asked,
        side_by_side=side_by_side,
        device=device,
    ):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(
        "asr",
        short_help="Transcribe and score a recorded repeat (v1.0 unified + official rules, v1.5 "
        "timing, listening quality) with the run's scoring backends.",
    )(asr)
