"""Record many sessions with bounded concurrency; one session's failure never stops the others.

A server-side failure is already a recorded ``SessionRecord``. A client-side one (an unreadable
input WAV, an invalid --turn-detection, an existing recording) becomes a record with status
``error`` and a failure that names the sample; it is written to the job's session.json unless
that directory already holds a recording.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdb.audio import Audio, read_wav
from fdb.dialects import Dialect, get_dialect
from fdb.errors import FdbError
from fdb.io import atomic_write_json, redact_url
from fdb.session_records import SessionRecord, Verdict
from fdb.session_settings import SessionSettings
from recorders.looplag import paced_gc
from recorders.session import record_session, start_finisher

Progress = Callable[[int, int, SessionRecord], None]


@dataclass(frozen=True)
class SessionJob:
    """One session to record: ``audio`` is loaded lazily when it is a path."""

    url: str
    audio: Audio | Path
    out_dir: Path
    sample_id: str
    variant: str
    profile: Dialect | str
    turn_detection: dict[str, Any] | str | None
    model: str | None = None
    instructions: str | None = None
    settings: SessionSettings | None = (
        None  # --instructions / --voice / --sampling / --reference-audio
    )
    timeout_s: float = 90.0
    extra_meta: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.sample_id} [{self.variant}]"


async def record_many(
    jobs: Sequence[SessionJob], concurrency: int = 1, progress: Progress | None = None
) -> list[SessionRecord]:
    """Run ``jobs`` at most ``concurrency`` at a time; results are in job order.
    ``progress(done, total, record)`` is called as each session finishes."""
    if concurrency < 1:
        raise FdbError(f"concurrency must be at least 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)
    await start_finisher()
    with paced_gc():
        return await _gather(jobs, gate, progress)


async def _gather(
    jobs: Sequence[SessionJob], gate: asyncio.Semaphore, progress: Progress | None
) -> list[SessionRecord]:
    done = 0

    async def one(job: SessionJob) -> SessionRecord:
        nonlocal done
        async with gate:
            record = await _run_job(job)
        done += 1
        if progress is not None:
            progress(done, len(jobs), record)
        return record

    return list(await asyncio.gather(*(one(job) for job in jobs)))


async def _run_job(job: SessionJob) -> SessionRecord:
    try:
        audio = job.audio if isinstance(job.audio, Audio) else read_wav(job.audio, job.label)
        return await record_session(
            job.url,
            audio,
            job.out_dir,
            sample_id=job.sample_id,
            variant=job.variant,
            profile=job.profile,
            turn_detection=job.turn_detection,
            model=job.model,
            instructions=job.instructions,
            settings=job.settings,
            timeout_s=job.timeout_s,
            extra_meta=job.extra_meta,
        )
    except Exception as exc:  # a client-side problem with this job only
        message = exc.one_line() if isinstance(exc, FdbError) else f"{type(exc).__name__}: {exc}"
        return _client_failure(job, message)


def _client_failure(job: SessionJob, message: str) -> SessionRecord:
    """A record for a session that could not be run; written unless a recording exists."""
    try:
        profile = get_dialect(job.profile)
        name, trace_format, output_rate = (
            profile.name,
            profile.trace_format,
            profile.formats.output_rate,
        )
    except FdbError:
        name, trace_format, output_rate = str(job.profile), "unknown", 24000
    failure = message if job.sample_id in message else f"{job.label}: {message}"
    record = SessionRecord(
        sample_id=job.sample_id,
        variant=job.variant,
        profile=name,
        trace_format=trace_format,
        url=redact_url(job.url),
        model=job.model,
        output_rate=output_rate,
        timeout_s=job.timeout_s,
        status="error",
        failure=f"client error: {failure}",
        verdict=Verdict(status="fail", violations=[f"error: client error: {failure}"]),
        extra=dict(job.extra_meta),
    )
    path = Path(job.out_dir) / "session.json"
    if not path.exists():
        atomic_write_json(path, record.dump())
    return record
