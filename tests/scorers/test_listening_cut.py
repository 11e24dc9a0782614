"""Reply cutting from traces and the text metrics, without models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.support.listening_build import OUT_RATE, write_session
from fdb.audio import float_to_pcm16
from fdb.dialects import LEGACY, TURN_BASED
from fdb.errors import FdbError
from fdb.io import dumps_json, read_json
from fdb.models import BackendIdentity
from fdb.playout import playout_window, trace_playout_inputs
from fdb.records.listening import (
    REPLIES_SCHEMA,
    SCORES_SCHEMA,
    ListeningReplies,
    ListeningScores,
)
from fdb.session_records import TraceEvent, read_trace
from scorers.listening import score_listening
from scorers.listening_cut import cut_replies
from scorers.listening_text import align


def tone(seconds: float, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * OUT_RATE)) / OUT_RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_late_gaps_left_out_and_barge_in_cut(tmp_path):
    folder = tmp_path / "s"
    # r0 arrives slower than real time (gaps), completes; r1 arrives 4x real time from t=10 and is
    # cancelled at 11.0, when FIFO playout has played 1.0 s of it
    write_session(
        folder,
        [
            {"id": "r0", "audio": tone(2.0), "t": 0.0, "transcript": "red green", "rate_x": 0.5},
            {
                "id": "r1",
                "audio": tone(4.0),
                "t": 10.0,
                "transcript": "blue sky",
                "status": "cancelled",
                "done_t": 11.0,
            },
        ],
    )
    replies = cut_replies(
        read_trace(folder / "trace.jsonl"),
        (folder / "output.pcm").read_bytes(),
        TURN_BASED,
        OUT_RATE,
    )
    assert [r.response_id for r in replies] == ["r0", "r1"]
    assert (
        len(replies[0].audio(OUT_RATE)) == 2 * 16000
    )  # back to back: 2.0 s, not 4.0 s of wall time
    assert replies[0].status == "completed" and not replies[0].barge_in_cut
    assert replies[1].status == "cancelled" and replies[1].barge_in_cut
    assert len(replies[1].audio(OUT_RATE)) == 16000  # 1.0 s played before the cancellation
    assert replies[1].transcript == "blue sky"


def test_align_counts_deletions_as_omissions():
    counts = align("Hello, Mr. Smith! It's 5 o'clock.", "hello mister smith")
    assert counts.reference_words > 3 and counts.deletions >= 2 and counts.hits >= 2
    assert align("", "anything") is None
    assert align("red green blue", "").deletions == 3


class FakeAsr:
    from fdb.models import BackendIdentity

    identity = BackendIdentity(kind="asr", name="fake")

    def transcribe(self, samples):
        from fdb.models.asr import Transcript

        return Transcript(text="red green", words=[])


def test_missing_backends_are_null_with_notes(tmp_path):
    root = tmp_path / "repeat-1"
    write_session(
        root / "recording/shard-0/user_interruption/1/overlap",
        [{"id": "a", "audio": tone(4.0), "t": 0.5, "transcript": "red green blue"}],
    )
    write_session(
        root / "v10/recording/shard-0/synthetic_pause_handling/3/main",
        [
            {"id": "b", "audio": tone(1.0), "t": 0.5, "transcript": "red green"},
            {
                "id": "c",
                "audio": tone(3.5),
                "t": 5.0,
                "transcript": "x",
                "status": "cancelled",
                "done_t": 9.0,
            },
        ],
    )
    summary = score_listening(root, asr=FakeAsr(), mos=False, speaker=False)
    v15, v10 = summary.datasets["v1.5"]["user_interruption"], summary.datasets["v1.0"]["all"]
    assert (
        v15.omission_rate == 1 / 3
        and v15.wer == 1 / 3
        and v15.mos_mean is None
        and v15.voice_mean is None
    )
    assert (v10.replies, v10.short_replies, v10.compared_replies, v10.cancelled_replies) == (
        2,
        1,
        1,
        1,
    )
    assert v10.omission_rate == 0.0 and v10.wer == 0.0  # the short reply counts for WER too (spec)
    assert v10.wer_reference_words == v10.reference_words == 2
    assert summary.backends["mos"] is None and any("mos" in n for n in summary.notes)
    replies = _reads_back(root / "listening")[0].replies
    assert [r.reply_id for r in replies] == [
        "v1.0/synthetic_pause_handling/3/main/0",
        "v1.0/synthetic_pause_handling/3/main/1",
        "v1.5/user_interruption/1/overlap/0",
    ]
    assert (root / "listening/wav/v1.5/user_interruption/1/overlap/0.wav").exists()
    assert (root / "listening/voice-window/v1.5/user_interruption/1/overlap/0.wav").exists()
    assert read_json(root / "listening/summary.json")["schema"] == "fdb-listening-2"


def _reads_back(out: Path) -> tuple[ListeningReplies, ListeningScores]:
    """replies.json and scores.json, as the scorer wrote them, read back through their records
    and dumped again: the same bytes (every key and value the writer wrote survives the round
    trip)."""
    replies = ListeningReplies.load(out / "replies.json")
    scores = ListeningScores.load(out / "scores.json")
    assert dumps_json(replies.dump()) == (out / "replies.json").read_text()
    assert dumps_json(scores.dump()) == (out / "scores.json").read_text()
    assert [r.reply_id for r in replies.replies] == [s.reply_id for s in scores.replies]
    return replies, scores


class FakeMos:
    identity = BackendIdentity(kind="mos", name="fake")

    def score(self, samples):
        return 3.0 + len(samples) % 7 / 10


class FakeSpeaker:
    identity = BackendIdentity(kind="speaker", name="fake")

    def embed(self, samples):
        return np.array([1.0, len(samples) % 5, 0.5])


def test_replies_and_scores_read_back_through_their_records(tmp_path):
    root = tmp_path / "repeat-1"
    write_session(
        root / "recording/shard-0/user_interruption/1/overlap",
        [
            {"id": "a", "audio": tone(4.0), "t": 0.5, "transcript": "red green blue"},
            {"id": "b", "audio": tone(3.2, 300.0), "t": 8.0, "transcript": "sky"},
        ],
    )
    write_session(
        root / "v10/recording/shard-0/synthetic_pause_handling/3/main",
        [
            {"id": "c", "audio": tone(1.0), "t": 0.5, "transcript": "red green"},
            {
                "id": "d",
                "audio": tone(3.5),
                "t": 5.0,
                "transcript": "x",
                "status": "cancelled",
                "done_t": 9.0,
            },
        ],
    )
    score_listening(root, asr=FakeAsr(), mos=FakeMos(), speaker=FakeSpeaker())
    replies, scores = _reads_back(root / "listening")
    assert replies.schema_ == REPLIES_SCHEMA and scores.schema_ == SCORES_SCHEMA
    assert {k: v["name"] for k, v in scores.backends.items()} == dict.fromkeys(
        ("asr", "mos", "speaker"), "fake"
    )
    assert all(r.wav_sha256 and r.asr_text == "red green" for r in replies.replies)
    assert [s.counts is not None for s in scores.replies] == [True, False, True, True]
    assert all(s.voice_similarity is not None for s in scores.replies if not s.short)

    (root / "listening/scores.json").write_text('{"schema": "fdb-listening-scores-2"}')
    with pytest.raises(FdbError, match=r"scores.json: backends: Field required") as err:
        score_listening(root, asr=FakeAsr(), mos=FakeMos(), speaker=FakeSpeaker())
    assert "delete it and rescore" in err.value.hint
    (root / "listening/scores.json").unlink()  # no previous scores: scored afresh
    score_listening(root, asr=FakeAsr(), mos=FakeMos(), speaker=FakeSpeaker())
    assert _reads_back(root / "listening")[1] == scores


def _legacy_trace(rate: int, td_cut: str) -> tuple[list[TraceEvent], bytes, np.ndarray]:
    """One legacy reply of 2 s sent at 4x real time from 0.5 s, finished on the server (status
    completed at 1.0 s), its playout stopped at 1.3 s by ``td_cut`` (cleared or speech_started)."""
    t = np.arange(2 * rate) / rate
    audio = (0.2 + 0.1 * np.sin(2 * np.pi * 220 * t) * t).astype(np.float32)
    pcm, events = float_to_pcm16(audio), []
    step = rate // 5 * 2  # 200 ms of PCM16
    for k, off in enumerate(range(0, len(pcm), step)):
        events.append(
            {
                "t": 0.5 + 0.05 * k,
                "dir": "recv",
                "type": "response.audio.delta",
                "event": {"response_id": "r1", "audio_offset": off, "audio_bytes": step},
            }
        )
    done = {
        "id": "r1",
        "status": "completed",
        "output": [{"content": [{"transcript": "red green blue"}]}],
    }
    events += [
        {"t": 1.0, "dir": "recv", "type": "response.done", "event": {"response": done}},
        {"t": 1.3, "dir": "recv", "type": td_cut, "event": {"response_id": "r1"}},
    ]
    return [TraceEvent.model_validate(e) for e in events], pcm, audio


@pytest.mark.parametrize(
    "cut", ["output_audio_buffer.cleared", "input_audio_buffer.speech_started"]
)
def test_legacy_reply_is_cut_where_the_exports_playout_stops(cut):
    rate, td = (
        16000,
        {"type": "server_vad"},
    )  # 16 kHz output: no resampling, so samples compare exactly
    trace, pcm, audio = _legacy_trace(rate, cut)
    (reply,) = cut_replies(trace, pcm, LEGACY, rate, td)
    deltas, cancels = trace_playout_inputs(trace, pcm, LEGACY, td)
    window = playout_window(deltas, cancels, rate, 3.0).samples
    played = np.flatnonzero(np.abs(window) > 0)
    assert (played[0], played[-1] + 1) == (
        8000,
        20800,
    )  # the export plays 0.5 s .. the cut at 1.3 s
    assert reply.barge_in_cut and reply.status == "completed"
    assert np.array_equal(reply.audio(rate), window[8000:20800])
    assert np.allclose(reply.audio(rate), audio[:12800], atol=1 / 32767)
    (whole,) = cut_replies(trace, pcm, LEGACY, rate, {**td, "interrupt_response": False})
    assert len(whole.audio(rate)) == (12800 if cut == "output_audio_buffer.cleared" else 32000)


class CountingAsr(FakeAsr):
    def __init__(self):
        self.calls = 0

    def transcribe(self, samples):
        self.calls += 1
        return super().transcribe(samples)


class CountingMos:
    from fdb.models import BackendIdentity

    identity = BackendIdentity(kind="mos", name="counting")

    def __init__(self):
        self.calls = 0

    def score(self, samples):
        self.calls += 1
        return 3.0


def test_a_rerun_with_the_same_backends_reuses_asr_text_and_mos(tmp_path):
    root = tmp_path / "repeat-1"
    write_session(
        root / "v10/recording/shard-0/synthetic_pause_handling/3/main",
        [{"id": "a", "audio": tone(3.5), "t": 0.5, "transcript": "red green"}],
    )
    asr, mos = CountingAsr(), CountingMos()
    first = score_listening(root, asr=asr, mos=mos, speaker=False)
    scores = (root / "listening/scores.json").read_bytes()
    _reads_back(root / "listening")
    second = score_listening(root, asr=asr, mos=mos, speaker=False)
    assert (asr.calls, mos.calls) == (1, 1) and first.datasets == second.datasets
    assert (root / "listening/scores.json").read_bytes() == scores
    other = CountingMos()
    other.identity = other.identity.model_copy(update={"name": "another"})
    score_listening(root, asr=asr, mos=other, speaker=False)
    assert (asr.calls, other.calls) == (
        1,
        1,
    )  # another MOS model scores again; the ASR text is kept
