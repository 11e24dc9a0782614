"""`tts-bench`: replay a Seed-TTS list against ``/v1/audio/speech`` at rising concurrency, one
level after another (closed loop, warm-ups excluded), then score serving and quality and write
``tts.json``, ``TTS.md``, ``tables/*.csv`` and ``plots/tts-concurrency.png``.

Layout of ``--output DIR``::

    run.json                     options, dataset, endpoint (what was replayed)
    concurrency-N/level.json     the level's request body and counts
    concurrency-N/requests.jsonl one TtsRequestRecord per request (warm-ups included, marked)
    concurrency-N/metrics.jsonl  the per-request metrics (scorers.tts_serving.RequestMetrics)
    concurrency-N/audio/ID.wav   the audio each measured request received, at its declared rate
    quality/quality.jsonl        per-utterance WER / SIM / MOS of the scored level
    quality/quality.json         their summary
    logs/model-server.log        the bundled server's log (when it was started here)

A level's failed requests are part of its result; the run goes on to the next level.
``rescore`` rebuilds everything after the recordings from these files.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fdb.datasets.seedtts import SeedTtsItem
from fdb.errors import FdbError
from fdb.io import atomic_write_json, atomic_write_jsonl, read_json
from fdb.tts_records import TtsLevelSpec, TtsRequestRecord

TTS_BENCH_SCHEMA = "fdb-tts-bench-1"


class QualityOptions(BaseModel):
    enabled: bool = True
    asr_model: str | None = None
    asr_model_sha256: str | None = None
    speaker_checkpoint: str | None = None
    speaker_sha256: str | None = None
    utmos_checkpoint: str | None = None
    utmos_sha256: str | None = None
    sim: bool = True
    mos: bool = True


class TtsBenchOptions(BaseModel):
    output: Path
    concurrency: list[int]
    num_prompts: int = 8
    num_warmups: int = 1
    url: str | None = None
    system: str = "embedded-cascade"
    dataset_root: Path | None = None
    list_name: str = "en/meta.lst"
    model: str | None = None
    stream_format: str = "audio"
    transport: str = "http"  # http (/v1/audio/speech) | realtime (/v1/realtime, recorders.tts_realtime)
    ref_audio: str = "inline"
    extra_body: dict[str, object] = Field(default_factory=dict)
    sample_rate: int | None = None
    channels: int | None = None
    frame_rate: float | None = None
    max_audio_s: float | None = None
    playback_reserve_ms: float = 80.0
    timeout_s: float = 120.0
    api_key_env: str | None = None  # the variable's name only: the key never reaches a file
    quality: QualityOptions = QualityOptions()


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


def level_dir(output: Path, concurrency: int) -> Path:
    return output / f"concurrency-{concurrency}"


def write_level(directory: Path, results: list[tuple[TtsRequestRecord, bytes]], reserve_s: float) -> None:
    """requests.jsonl, metrics.jsonl and the measured requests' audio."""
    from fdb.audio import write_pcm16_wav
    from scorers.tts_serving import request_metrics

    for record, pcm in results:
        if record.warmup or not pcm or not record.sample_rate:
            continue
        rel = f"audio/{record.id}.wav"
        if (record.channels or 1) == 1:
            write_pcm16_wav(directory / rel, pcm, record.sample_rate)
        else:  # interleaved: keep the first channel
            import numpy as np

            frames = np.frombuffer(pcm, dtype="<i2").reshape(-1, record.channels)[:, 0]
            write_pcm16_wav(directory / rel, frames.tobytes(), record.sample_rate)
        record.audio_path = rel
    atomic_write_jsonl(directory / "requests.jsonl", [record.dump() for record, _ in results])
    atomic_write_jsonl(directory / "metrics.jsonl",
                       [request_metrics(record, reserve_s) for record, _ in results if not record.warmup])


def run_level(items: list[SeedTtsItem], opts: TtsBenchOptions, client_opts, concurrency: int,
              console: Console) -> list[tuple[TtsRequestRecord, bytes]]:
    from recorders.tts_client import build_body, replay

    directory = level_dir(opts.output, concurrency)
    if (directory / "requests.jsonl").exists():
        raise FdbError(f"{directory} already holds a recording", "use another --output, or delete it to redo the run")
    body = {k: v for k, v in build_body(items[0], client_opts).items() if k not in ("input", "ref_audio", "ref_text")}
    spec = TtsLevelSpec(concurrency=concurrency, url=client_opts.endpoint, requests=len(items),
                        warmups=opts.num_warmups, body=body, ref_audio=opts.ref_audio)
    atomic_write_json(directory / "level.json", spec.dump())
    columns = (TextColumn(f"[bold]{concurrency} at once"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[last]}"))
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
        raise FdbError(f"{directory} holds no requests.jsonl", "record the level with tts-bench first")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [TtsRequestRecord.model_validate_json(line) for line in lines if line.strip()]


def _quality_jobs(records: list[TtsRequestRecord], directory: Path, prompts: dict[str, str]):
    from scorers.tts_quality import QualityJob

    jobs = []
    for record in records:
        if record.warmup:
            continue
        wav = str(directory / record.audio_path) if record.audio_path else None
        note = record.error if record.status != "ok" else (None if wav else "no audio")
        jobs.append(QualityJob(id=record.id, lang=record.list_name.split("/")[0], reference=record.target_text,
                               wav=wav, prompt_wav=prompts[record.id], note=note))
    return jobs


def score_quality(opts: TtsBenchOptions, concurrency: int, prompts: dict[str, str], console: Console):
    """Quality of the audio of one level (the lowest): quality/quality.jsonl and quality.json."""
    from scorers.tts_quality import load_backends
    from scorers.tts_quality import score_quality as score

    q = opts.quality
    directory = level_dir(opts.output, concurrency)
    jobs = _quality_jobs(load_records(directory), directory, prompts)
    console.print(f"quality of the concurrency-{concurrency} audio ({len(jobs)} utterances): loading ASR/SIM/MOS …")
    asr, speaker, mos = load_backends(q.asr_model, q.asr_model_sha256, q.speaker_checkpoint, q.speaker_sha256,
                                      q.utmos_checkpoint, q.utmos_sha256, sim=q.sim, mos=q.mos)
    columns = (TextColumn("[bold]quality"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("utterances", total=len(jobs))
        rows, summary = score(jobs, asr, speaker, mos, progress=lambda done, _total: bar.update(task, completed=done))
    summary.notes.insert(0, f"scored the audio of the concurrency-{concurrency} level")
    atomic_write_jsonl(opts.output / "quality" / "quality.jsonl", rows)
    atomic_write_json(opts.output / "quality" / "quality.json", summary.dump())
    return summary


def build_report(output: Path) -> dict:
    """tts.json, TTS.md, tables/*.csv and the plot from the recorded levels (and quality.json)."""
    from fdb.provenance import current
    from reports.tts import write_report
    from scorers.tts_serving import level_row

    if not (output / "run.json").is_file():
        raise FdbError(f"{output} holds no run.json", "pass the --output of an earlier tts-bench run")
    run = read_json(output / "run.json")
    opts = TtsBenchOptions.model_validate(run["options"])
    rows = [level_row(n, load_records(level_dir(output, n)), opts.playback_reserve_ms / 1000.0, opts.frame_rate)
            for n in opts.concurrency if (level_dir(output, n) / "requests.jsonl").is_file()]
    quality_path = output / "quality" / "quality.json"
    data = {"schema": TTS_BENCH_SCHEMA, "run": run, "rows": [row.model_dump(mode="json") for row in rows],
            "quality": read_json(quality_path) if quality_path.is_file() else None,
            "stop_violations": _stop_violations(output, opts), "provenance": current().model_dump(mode="json")}
    atomic_write_json(output / "tts.json", data)
    write_report(output, data)
    return data


def _stop_violations(output: Path, opts: TtsBenchOptions) -> list[dict]:
    """Every measured request whose audio broke the stop condition, level by level."""
    from scorers.tts_serving import request_metrics

    found = []
    for n in opts.concurrency:
        if not (level_dir(output, n) / "requests.jsonl").is_file():
            continue
        for record in load_records(level_dir(output, n)):
            m = request_metrics(record, opts.playback_reserve_ms / 1000.0)
            if not record.warmup and m.stop_violation:
                found.append({"concurrency": n, "id": record.id, "audio_s": m.audio_s,
                              "audio_after_done_s": m.audio_after_done_s, "overrun_s": m.overrun_s,
                              "max_audio_s": record.max_audio_s})
    return found


def _client_options(opts: TtsBenchOptions, url: str):
    from recorders.tts_client import SpeechClientOptions

    return SpeechClientOptions(url=url, model=opts.model, stream=True, stream_format=opts.stream_format,
                               response_format="pcm", ref_audio=opts.ref_audio, extra_body=opts.extra_body,
                               sample_rate=opts.sample_rate, channels=opts.channels, timeout_s=opts.timeout_s,
                               max_audio_s=opts.max_audio_s, transport=opts.transport,
                               api_key_env=opts.api_key_env)


def _load_items(opts: TtsBenchOptions, console: Console) -> tuple[list[SeedTtsItem], dict]:
    from fdb.datasets.seedtts import load_seedtts
    from fdb.io import sha256_file
    from fdb.settings import load_settings
    from runs.datasets import resolve_seedtts

    tree = resolve_seedtts(load_settings(), opts.dataset_root)
    loaded = load_seedtts(tree.root, [opts.list_name])
    rows = loaded.lists[opts.list_name]
    items = select_items(rows, opts.num_prompts)
    console.print(f"Seed-TTS {opts.list_name} ({tree.source}, {tree.root}): {len(rows)} rows, "
                  f"{len(items)} prompts per level")
    dataset = {"root": str(tree.root), "source": tree.source, "list": opts.list_name, "rows": len(rows),
               "list_sha256": sha256_file(tree.root / opts.list_name)}
    return items, dataset


def _start_server(opts: TtsBenchOptions, console: Console):
    from fdb.settings import load_settings
    from runs.server import ManagedServer

    port = load_settings().server_port
    server = ManagedServer(system=opts.system, host="127.0.0.1", port=port,
                           log_path=opts.output / "logs" / "model-server.log")
    console.print(f"starting the bundled server {opts.system} on :{port} …")
    server.start()
    return server


def server_info(url: str) -> dict | None:
    """What the server says about itself (GET /health and /v1/models), best effort: a server
    without them is measured all the same."""
    import httpx

    found = {}
    for path in ("/health", "/v1/models"):
        try:
            reply = httpx.get(url.rstrip("/") + path, timeout=5.0)
            found[path] = reply.json() if reply.status_code == 200 else {"http_status": reply.status_code}
        except (httpx.HTTPError, ValueError):
            found[path] = None
    return found


def bench(opts: TtsBenchOptions, console: Console | None = None) -> dict:
    """Record every level (starting the bundled server unless --url), score, report."""
    console = console or Console(stderr=True)
    if any(level_dir(opts.output, n).joinpath("requests.jsonl").exists() for n in opts.concurrency):
        raise FdbError(f"{opts.output} already holds recorded levels", "use another --output, or --report-only")
    if opts.transport == "realtime" and opts.url is None:
        raise FdbError("the bundled server's /v1/realtime is a spoken-dialogue cascade, not a TTS session",
                       "pass --url of a server that reads text aloud over /v1/realtime, or use --transport http")
    items, dataset = _load_items(opts, console)
    notes: list[str] = []
    server = None
    if opts.url is None:
        server = _start_server(opts, console)
        if opts.ref_audio != "none" and "ignore_ref_audio" not in opts.extra_body:
            opts = opts.model_copy(update={"extra_body": {**opts.extra_body, "ignore_ref_audio": True}})
            notes.append("the bundled endpoint cannot clone voices: ref_audio was sent with ignore_ref_audio "
                         "and the built-in Piper voice spoke")
    url = opts.url or server.http_url
    run = {"schema": TTS_BENCH_SCHEMA, "options": opts.model_dump(mode="json"), "dataset": dataset,
           "endpoint": _client_options(opts, url).endpoint, "server": None if server is None else opts.system,
           "server_info": server_info(url),
           "prompt_wavs": {item.id: str(item.prompt_wav) for item in items}, "notes": notes}
    atomic_write_json(opts.output / "run.json", run)
    try:
        client_opts = _client_options(opts, url)
        for level in opts.concurrency:
            run_level(items, opts, client_opts, level, console)
            if server is not None:
                server.check_alive()
    finally:
        if server is not None:
            server.stop()
    if opts.quality.enabled:
        score_quality(opts, opts.concurrency[0], run["prompt_wavs"], console)
    return build_report(opts.output)
