"""`tts-bench`: replay a Seed-TTS list against ``/v1/audio/speech`` at each concurrency level
entry, one after another (closed loop, warm-ups excluded), then score serving and quality and
write ``tts.json``, ``TTS.md``, ``tables/*.csv`` and ``plots/tts-concurrency.png``.

``--concurrency`` lists level entries ("64 64 128", "1,2,2,4": repeats allowed, any order). With
``--rounds N`` each entry is recorded N times (its row is the mean over them); ``--cold-round``
(default with N >= 2) records one more round first, reported apart and left out of the mean.

Layout of ``--output DIR`` when every entry is unique, N is 1 and there is no cold round::

    run.json                     options, dataset, endpoint (what was replayed)
    concurrency-N/level.json     the level's request body and counts
    concurrency-N/requests.jsonl one TtsRequestRecord per request (warm-ups included, marked)
    concurrency-N/metrics.jsonl  the per-request metrics (scorers.tts_serving.RequestMetrics)
    concurrency-N/audio/ID.wav   the audio each measured request received, at its declared rate
    quality/quality.jsonl        per-utterance WER / SIM / MOS of the scored level
    quality/quality.json         their summary
    logs/model-server.log        the bundled server's log (when it was started here)

Otherwise each entry is ``concurrency-N/`` (the first entry of N) or ``concurrency-N~K/`` (the
K-th), holding ``cold/`` and ``round-1/`` .. ``round-N/``, each laid out as a level directory
above. Quality is scored on the first measured round of the first entry.

A level's failed requests are part of its result; the run goes on to the next level.
``rescore`` rebuilds everything after the recordings from these files.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fdb.audio import write_pcm16_wav
from fdb.datasets.seedtts import SeedTtsItem, load_seedtts
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_jsonl, read_jsonl, redact_url, sha256_file
from fdb.provenance import current
from fdb.records.tts import (
    LevelRow,
    LevelStats,
    QualitySummary,
    RoundRow,
    StopViolation,
    TtsBenchOptions,
    TtsDataset,
    TtsReport,
    TtsRun,
)
from fdb.run_manifest import ServerProvenance
from fdb.settings import load_settings
from fdb.tts_records import TtsLevelSpec, TtsRequestRecord
from recorders.tts_client import SpeechClientOptions, build_body, replay
from reports.tts import write_report
from runs.datasets import resolve_seedtts
from runs.server import ManagedServer
from runs.server_probe import describe, probe_server
from scorers.tts_quality import QualityJob, load_backends
from scorers.tts_quality import score_quality as score_tts
from scorers.tts_serving import level_row, level_stats, mean_row, request_metrics


class RoundSpec(BaseModel):
    """One round to record: the entry's position in --concurrency, its round and directory."""

    entry: int
    concurrency: int
    round: int  # 1..rounds; 0 for the cold round
    cold: bool = False
    directory: str  # relative to the run directory


def parse_concurrency(text: str) -> list[int]:
    """ "64 64 128" or "1,2,2,4" -> the level entries in order: commas and/or spaces,
    repeats allowed."""
    hint = "e.g. --concurrency 1,2,4,8 or --concurrency '64 64 128'"
    parts = [part for part in re.split(r"[,\s]+", text.strip()) if part]
    try:
        levels = [int(part) for part in parts]
    except ValueError:
        raise FdbError(f"--concurrency {text!r} is not a list of integers", hint) from None
    if not levels or any(n < 1 for n in levels):
        raise FdbError(f"--concurrency {text!r} must list positive integers", hint)
    return levels


def flat_layout(opts: TtsBenchOptions) -> bool:
    """One concurrency-N/ directory per level (the layout of runs without rounds)."""
    return (
        len(set(opts.concurrency)) == len(opts.concurrency)
        and opts.rounds == 1
        and not opts.cold_round
    )


def plan_rounds(opts: TtsBenchOptions) -> list[RoundSpec]:
    """Every round of the run in recording order: per entry its cold round, then round 1..N."""
    flat, seen, plan = flat_layout(opts), {}, []
    for entry, n in enumerate(opts.concurrency, start=1):
        seen[n] = seen.get(n, 0) + 1
        base = f"concurrency-{n}" + (f"~{seen[n]}" if seen[n] > 1 else "")
        if flat:
            plan.append(RoundSpec(entry=entry, concurrency=n, round=1, directory=base))
            continue
        if opts.cold_round:
            plan.append(
                RoundSpec(entry=entry, concurrency=n, round=0, cold=True, directory=f"{base}/cold")
            )
        plan += [
            RoundSpec(entry=entry, concurrency=n, round=r, directory=f"{base}/round-{r}")
            for r in range(1, opts.rounds + 1)
        ]
    return plan


def _label(spec: RoundSpec, opts: TtsBenchOptions) -> str:
    label = f"{spec.concurrency} at once"
    if flat_layout(opts):
        return label
    return (
        label
        + f" (entry {spec.entry}, "
        + ("cold round)" if spec.cold else f"round {spec.round}/{opts.rounds})")
    )


def select_items(items: list[SeedTtsItem], count: int) -> list[SeedTtsItem]:
    """The first ``count`` rows in list order; a list shorter than ``count`` is cycled, the
    repeats getting ``~K`` appended to their id."""
    if not items:
        raise FdbError("the Seed-TTS list has no rows", "check the dataset root")
    chosen = []
    for number in range(count):
        item, lap = items[number % len(items)], number // len(items)
        chosen.append(item if lap == 0 else item.model_copy(update={"id": f"{item.id}~{lap}"}))
    return chosen


def write_level(
    directory: Path, results: list[tuple[TtsRequestRecord, bytes]], reserve_s: float
) -> None:
    """requests.jsonl, metrics.jsonl and the measured requests' audio."""
    for record, pcm in results:
        if record.warmup or not pcm or not record.sample_rate:
            continue
        rel = f"audio/{record.id}.wav"
        if (record.channels or 1) == 1:
            write_pcm16_wav(directory / rel, pcm, record.sample_rate)
        else:  # interleaved: keep the first channel
            frames = np.frombuffer(pcm, dtype="<i2").reshape(-1, record.channels)[:, 0]
            write_pcm16_wav(directory / rel, frames.tobytes(), record.sample_rate)
        record.audio_path = rel
    atomic_write_jsonl(directory / "requests.jsonl", [record.dump() for record, _ in results])
    atomic_write_jsonl(
        directory / "metrics.jsonl",
        [request_metrics(record, reserve_s) for record, _ in results if not record.warmup],
    )


def run_level(
    items: list[SeedTtsItem], opts: TtsBenchOptions, client_opts, spec: RoundSpec, console: Console
) -> list[tuple[TtsRequestRecord, bytes]]:
    """Record one round of one level entry into its directory."""
    concurrency, directory = spec.concurrency, opts.output / spec.directory
    if (directory / "requests.jsonl").exists():
        raise FdbError(
            f"{directory} already holds a recording",
            "use another --output, or delete it to redo the run",
        )
    body = {
        k: v
        for k, v in build_body(items[0], client_opts).items()
        if k not in ("input", "ref_audio", "ref_text")
    }
    level = TtsLevelSpec(
        concurrency=concurrency,
        url=redact_url(client_opts.endpoint),
        requests=len(items),
        warmups=opts.num_warmups,
        body=body,
        ref_audio=opts.ref_audio,
    )
    atomic_write_json(directory / "level.json", level.dump())
    columns = (
        TextColumn(f"[bold]{_label(spec, opts)}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("requests", total=len(items), last="")

        def tick(record: TtsRequestRecord) -> None:
            bar.update(task, advance=1, last=f"{record.id} {record.status}")

        results = asyncio.run(replay(items, client_opts, concurrency, opts.num_warmups, tick))
    write_level(directory, results, opts.playback_reserve_ms / 1000.0)
    return results


def load_records(directory: Path) -> list[TtsRequestRecord]:
    path = directory / "requests.jsonl"
    if not path.is_file():
        raise FdbError(
            f"{directory} holds no requests.jsonl", "record the level with tts-bench first"
        )
    return read_jsonl(path, TtsRequestRecord)


def _quality_jobs(records: list[TtsRequestRecord], directory: Path, prompts: dict[str, str]):
    jobs = []
    for record in records:
        if record.warmup:
            continue
        wav = str(directory / record.audio_path) if record.audio_path else None
        note = record.error if record.status != "ok" else (None if wav else "no audio")
        jobs.append(
            QualityJob(
                id=record.id,
                lang=record.list_name.split("/")[0],
                reference=record.target_text,
                wav=wav,
                prompt_wav=prompts[record.id],
                note=note,
            )
        )
    return jobs


def score_quality(
    opts: TtsBenchOptions, spec: RoundSpec, prompts: dict[str, str], console: Console
):
    """Quality of the audio of one round (the first measured one of the first entry):
    quality/quality.jsonl and quality.json."""
    q = opts.quality
    directory = opts.output / spec.directory
    jobs = _quality_jobs(load_records(directory), directory, prompts)
    where = f"the concurrency-{spec.concurrency}" if flat_layout(opts) else spec.directory
    console.print(f"quality of {where} audio ({len(jobs)} utterances): loading ASR/SIM/MOS …")
    asr, speaker, mos = load_backends(
        q.asr_model,
        q.asr_model_sha256,
        q.speaker_checkpoint,
        q.speaker_sha256,
        q.utmos_checkpoint,
        q.utmos_sha256,
        sim=q.sim,
        mos=q.mos,
    )
    columns = (TextColumn("[bold]quality"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("utterances", total=len(jobs))
        rows, summary = score_tts(
            jobs, asr, speaker, mos, progress=lambda done, _total: bar.update(task, completed=done)
        )
    summary.notes.insert(
        0,
        f"scored the audio of the concurrency-{spec.concurrency} level"
        if flat_layout(opts)
        else f"scored the audio of {spec.directory} (the first measured round of the first entry)",
    )
    atomic_write_jsonl(opts.output / "quality" / "quality.jsonl", rows)
    atomic_write_json(opts.output / "quality" / "quality.json", summary.dump())
    return summary


def recorded_rounds(output: Path, opts: TtsBenchOptions) -> list[RoundSpec]:
    """The planned rounds that hold a recording (a run cut short has fewer)."""
    return [
        spec for spec in plan_rounds(opts) if (output / spec.directory / "requests.jsonl").is_file()
    ]


def round_rows(output: Path, opts: TtsBenchOptions) -> list[RoundRow]:
    """fdb.records.tts.RoundRow of every recorded round, cold ones included."""
    reserve = opts.playback_reserve_ms / 1000.0
    return [
        RoundRow(
            **spec.model_dump(),
            row=level_row(
                spec.concurrency, load_records(output / spec.directory), reserve, opts.frame_rate
            ),
        )
        for spec in recorded_rounds(output, opts)
    ]


def entry_rows(rounds: list[RoundRow]) -> tuple[list[LevelRow], list[LevelStats]]:
    """(one LevelRow per entry: the mean over its measured rounds, LevelStats per entry),
    in entry order."""
    measured: dict[int, list[LevelRow]] = {}
    for found in rounds:
        if not found.cold:
            measured.setdefault(found.entry, []).append(found.row)
    entries = sorted(measured.items())
    return [mean_row(rows) for _, rows in entries], [
        level_stats(entry, rows) for entry, rows in entries
    ]


def build_report(output: Path) -> TtsReport:
    """tts.json, TTS.md, tables/*.csv and the plot from the recorded rounds (and quality.json)."""
    run = TtsRun.load(output / "run.json")
    opts = run.options
    rounds = round_rows(output, opts)
    rows, stats = entry_rows(rounds)
    report = TtsReport(
        run=run,
        layout="levels" if flat_layout(opts) else "rounds",
        rows=rows,
        rounds=rounds,
        level_stats=stats,
        quality=QualitySummary.load(output / "quality" / "quality.json"),
        stop_violations=_stop_violations(output, opts),
        provenance=current().model_dump(mode="json"),
    )
    report.tables = [
        table.dump() for table in write_report(output, report)
    ]  # TTS.md's tables, as the CSVs
    atomic_write_json(output / "tts.json", report.dump())
    return report


def _stop_violations(output: Path, opts: TtsBenchOptions) -> list[StopViolation]:
    """Every measured request (cold rounds included, marked) whose audio broke the stop condition,
    round by round."""
    found = []
    for spec in recorded_rounds(output, opts):
        for record in load_records(output / spec.directory):
            m = request_metrics(record, opts.playback_reserve_ms / 1000.0)
            if not record.warmup and m.stop_violation:
                found.append(
                    StopViolation(
                        concurrency=spec.concurrency,
                        entry=spec.entry,
                        round=spec.round,
                        cold=spec.cold,
                        directory=spec.directory,
                        id=record.id,
                        audio_s=m.audio_s,
                        audio_after_done_s=m.audio_after_done_s,
                        overrun_s=m.overrun_s,
                        max_audio_s=record.max_audio_s,
                    )
                )
    return found


def _client_options(opts: TtsBenchOptions, url: str):
    return SpeechClientOptions(
        url=url,
        model=opts.model,
        stream=True,
        stream_format=opts.stream_format,
        response_format="pcm",
        ref_audio=opts.ref_audio,
        extra_body=opts.extra_body,
        sample_rate=opts.sample_rate,
        channels=opts.channels,
        timeout_s=opts.timeout_s,
        max_audio_s=opts.max_audio_s,
        transport=opts.transport,
        api_key_env=opts.api_key_env,
    )


def _load_items(opts: TtsBenchOptions, console: Console) -> tuple[list[SeedTtsItem], TtsDataset]:
    tree = resolve_seedtts(load_settings(), opts.dataset_root)
    loaded = load_seedtts(tree.root, [opts.list_name])
    rows = loaded.lists[opts.list_name]
    items = select_items(rows, opts.num_prompts)
    console.print(
        f"Seed-TTS {opts.list_name} ({tree.source}, {tree.root}): {len(rows)} rows, "
        f"{len(items)} prompts per level" + ("" if flat_layout(opts) else " and round")
    )
    dataset = TtsDataset(
        root=str(tree.root),
        source=tree.source,
        list_name=opts.list_name,
        rows=len(rows),
        list_sha256=sha256_file(tree.root / opts.list_name),
    )
    return items, dataset


def _start_server(opts: TtsBenchOptions, console: Console):
    port = load_settings().server_port
    server = ManagedServer(
        system=opts.system,
        host="127.0.0.1",
        port=port,
        log_path=opts.output / "logs" / "model-server.log",
    )
    console.print(f"starting the bundled server {opts.system} on :{port} …")
    server.start()
    return server


def server_provenance(opts: TtsBenchOptions, url: str, client_opts) -> ServerProvenance:
    """The declared revisions and what the server says about itself (GET
    /v1/realtime/capabilities, /v1/models and /health, best effort: a server without them is
    measured all the same, its fields null). The bearer token goes with the probes, never into
    the record."""
    headers = client_opts.auth_headers()
    report = probe_server(url, headers=headers, secrets=list(headers.values()))
    return ServerProvenance(
        url=None if opts.url is None else redact_url(opts.url),
        bundled_system=opts.system if opts.url is None else None,
        server_revision=opts.server_revision,
        model_revision=opts.model_revision,
        dataset_revision=opts.dataset_revision,
        reported=report,
    )


def _shown_options(opts: TtsBenchOptions) -> TtsBenchOptions:
    """The options as run.json keeps them: --url without its secrets (the key itself is never an
    option, only the name of its variable)."""
    return opts.model_copy(update={"url": redact_url(opts.url)}) if opts.url else opts


def bench(opts: TtsBenchOptions, console: Console | None = None) -> TtsReport:
    """Record every round of every level entry (starting the bundled server unless --url), score,
    report."""
    console = console or Console(stderr=True)
    plan = plan_rounds(opts)
    if any((opts.output / spec.directory / "requests.jsonl").exists() for spec in plan):
        raise FdbError(
            f"{opts.output} already holds recorded levels", "use another --output, or --report-only"
        )
    if opts.transport == "realtime" and opts.url is None:
        raise FdbError(
            "the bundled server's /v1/realtime is a spoken-dialogue cascade, not a TTS session",
            "pass --url of a server that reads text aloud over /v1/realtime, "
            "or use --transport http",
        )
    items, dataset = _load_items(opts, console)
    notes: list[str] = []
    server = None
    if opts.url is None:
        server = _start_server(opts, console)
        if opts.ref_audio != "none" and "ignore_ref_audio" not in opts.extra_body:
            opts = opts.model_copy(
                update={"extra_body": {**opts.extra_body, "ignore_ref_audio": True}}
            )
            notes.append(
                "the bundled endpoint cannot clone voices: ref_audio was sent with "
                "ignore_ref_audio and the built-in Piper voice spoke"
            )
    url = opts.url or server.http_url
    client_opts = _client_options(opts, url)
    provenance = server_provenance(opts, url, client_opts)
    console.print(
        escape(f"server {provenance.reported.url} reports: {describe(provenance.reported)}")
    )
    run = TtsRun(
        options=_shown_options(opts),
        dataset=dataset,
        endpoint=redact_url(client_opts.endpoint),
        server=None if server is None else opts.system,
        server_provenance=provenance,
        prompt_wavs={item.id: str(item.prompt_wav) for item in items},
        notes=notes,
    )
    atomic_write_json(opts.output / "run.json", run.dump())
    try:
        for spec in plan:
            run_level(items, opts, client_opts, spec, console)
            if server is not None:
                server.check_alive()
    finally:
        if server is not None:
            server.stop()
    if opts.quality.enabled:
        score_quality(opts, next(spec for spec in plan if not spec.cold), run.prompt_wavs, console)
    return build_report(opts.output)
