"""The batched CSM TTS on CPU with the tiny configuration (serving/gpu/csm.py, slots.py): the
slot cache's prefill and decode steps equal transformers' own backbone; the depth decoder's
codes are transformers' greedy codes; batching does not change a request's frames; the dummy
length rule, cancellation, a too-long prompt, closing the engine; and /v1/audio/speech,
capabilities and the realtime refusal of a speech-only csm_gpu server (in-process)."""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fdb.errors import FdbError

pytest.importorskip("transformers")

import torch  # noqa: E402 - after the skip

from benchmarks.gpu_tts import TINY  # noqa: E402
from serving.gpu.csm import CsmEngine, CsmOptions  # noqa: E402
from serving.gpu.slots import SlotCache, decode_layer, prefill_rows, rope_tables  # noqa: E402
from serving.weights import WeightSource, load_model  # noqa: E402

FRAME = 1920  # samples of one 80 ms Mimi frame at 24 kHz
LABEL = "dummy weights (csm-1b configuration; compute path only)"


@pytest.fixture(scope="module")
def model():
    threads = torch.get_num_threads()
    torch.set_num_threads(
        1
    )  # a tiny model gains nothing from more, and a busy CI core makes them spin
    torch.manual_seed(0)
    model = load_model(
        WeightSource("dummy", preset="csm-1b", overrides=TINY), "tts", "cpu", "float32"
    )
    # dummy Mimi codebooks are all zero (transformers' init), so every frame would decode to the
    # same samples whatever its codes; random codebooks make the audio follow the codes
    for module in model.codec_model.modules():
        if hasattr(module, "embed_sum"):
            module.embed_sum.normal_(std=0.05)
            module._embed = None
    yield model
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=[True, False], ids=["overlap", "no-overlap"])
def engine(model, request):
    """The engine, its loop overlapped (the next step launched before the last is read) and not
    (the default)."""
    engine = CsmEngine(
        model,
        CsmOptions(max_batch=4, max_len=256, temperature=0, overlap=request.param),
        dummy=True,
        weights_label=LABEL,
    )
    yield engine
    engine.close()


# --- the slot cache against transformers ---------------------------------------------------------


def _prefill(backbone, cache: SlotCache, prompts: list[torch.Tensor], slots: list[int]):
    """The prompts ([1, T_i, H] each) in one pass into rows ``slots``, right-padded; each row's
    normed hidden states of its own positions."""
    t = max(p.shape[1] for p in prompts)
    embeds = torch.zeros(len(prompts), t, prompts[0].shape[2])
    for row, p in enumerate(prompts):
        embeds[row, : p.shape[1]] = p[0]
    rotary = rope_tables(*backbone.rotary_emb(embeds, torch.arange(t)[None]))
    h = embeds
    for layer, k, v in zip(backbone.layers, cache.k, cache.v, strict=True):
        h = prefill_rows(layer, h, k, v, torch.tensor(slots), rotary)
    return [backbone.norm(h)[row, : p.shape[1]] for row, p in enumerate(prompts)]


def _decode(backbone, cache: SlotCache, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    cos, sin = backbone.rotary_emb(x, pos[:, None])
    mask = (torch.arange(cache.max_len)[None, :] <= pos[:, None])[:, None, None, :]
    h = x
    for layer, k, v in zip(backbone.layers, cache.k, cache.v, strict=True):
        h = decode_layer(layer, h, rope_tables(cos, sin), k, v, pos, mask)
    return backbone.norm(h)[:, 0]


def test_slot_prefill_and_decode_equal_the_transformers_backbone(model):
    backbone = model.backbone_model
    config = model.config
    generator = torch.Generator().manual_seed(1)
    lengths = [6, 11, 3]  # prompt tokens of three requests: decode positions 6, 11, 3
    sequences = [torch.randn(1, n + 1, config.hidden_size, generator=generator) for n in lengths]
    cache = SlotCache(
        len(backbone.layers),
        4,
        config.num_key_value_heads,
        32,
        backbone.layers[0].self_attn.head_dim,
        "cpu",
        torch.float32,
    )
    for tensor in cache.k + cache.v:  # stale rows of earlier requests: the masks must hide them
        tensor.normal_(generator=generator)
    with torch.inference_mode():
        reference = [backbone(inputs_embeds=s).last_hidden_state[0] for s in sequences]
        # one request alone: its prompt in one prefill (row 0), then one decode step
        (prompt,) = _prefill(backbone, cache, [sequences[0][:, :-1]], [0])
        torch.testing.assert_close(prompt, reference[0][:-1], atol=1e-5, rtol=1e-5)
        alone = _decode(backbone, cache, sequences[0][:, -1:], torch.tensor([lengths[0]]))
        torch.testing.assert_close(alone[0], reference[0][-1], atol=1e-5, rtol=1e-5)
        # three rows at different positions in one decode step (rows 1 and 2 prefilled in one
        # pass, the shorter one right-padded: its padding is written, then overwritten)
        prompts = _prefill(backbone, cache, [sequences[1][:, :-1], sequences[2][:, :-1]], [1, 2])
        for row, prompt in zip((1, 2), prompts, strict=True):
            torch.testing.assert_close(prompt, reference[row][:-1], atol=1e-5, rtol=1e-5)
        batched = _decode(
            backbone, cache, torch.cat([s[:, -1:] for s in sequences]), torch.tensor(lengths)
        )
    for row in range(3):
        torch.testing.assert_close(batched[row], reference[row][-1], atol=1e-5, rtol=1e-5)


def test_depth_step_codes_are_the_greedy_codes_of_transformers(engine, model):
    """``_depth`` at temperature 0: codebook 0 is the argmax of lm_head, and codebooks 1..31
    are the argmax of transformers' depth decoder fed the same codes (teacher forcing)."""
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(3, model.config.hidden_size, generator=generator)
    with torch.inference_mode():
        codes = engine._depth(hidden, 3)
        assert codes.shape == (3, model.config.num_codebooks)
        assert torch.equal(codes[:, 0], model.lm_head(hidden).argmax(-1))
        inputs = torch.nn.functional.pad(codes[:, :-1], (1, 0))  # position 0: the backbone state
        logits = model.depth_decoder(input_ids=inputs, backbone_last_hidden_state=hidden).logits
    assert torch.equal(logits.argmax(-1), codes[:, 1:])


def test_sampling_keeps_to_the_top_k_at_their_tempered_odds_and_buckets_are_powers_of_two():
    from serving.gpu.slots import bucket, sample_top_k

    logits = torch.tensor([[2.0, 1.0, 0.5, 3.0, -1.0]]).repeat(4000, 1)
    assert torch.equal(sample_top_k(logits, 3, 0), torch.full((4000,), 3))
    torch.manual_seed(4)
    share = torch.bincount(sample_top_k(logits, 3, 0.7), minlength=5) / 4000
    want = torch.zeros(5)
    want[[0, 1, 3]] = torch.softmax(torch.tensor([2.0, 1.0, 3.0]) / 0.7, 0)
    torch.testing.assert_close(share, want, atol=0.03, rtol=0)
    assert [bucket(b, 64) for b in (0, 1, 2, 3, 5, 33, 64)] == [1, 1, 2, 4, 8, 64, 64]
    assert bucket(5, 6) == 6


# --- the engine -----------------------------------------------------------------------------------


def _frames_of(
    engine: CsmEngine,
    text: str,
    wait: threading.Event | None = None,
    tell: threading.Event | None = None,
    **voice,
) -> list[np.ndarray]:
    """Every frame of ``text``; starts once ``wait`` is set, sets ``tell`` at its 2nd frame."""
    if wait is not None:
        assert wait.wait(30)
    frames = []
    for frame in engine.stream(text, **voice):
        frames.append(frame)
        if tell is not None and len(frames) == 2:
            tell.set()
    if tell is not None:
        tell.set()
    return frames


def _idle(engine: CsmEngine) -> bool:
    deadline = time.monotonic() + 5
    while any(engine._slots) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(engine._slots)


@contextlib.contextmanager
def _while_one_flows(engine: CsmEngine):
    """A long request streaming (a slot busy, steps running) for the block, which gets a pool
    for more requests; the long one is cancelled and drained at its end."""
    started, done = threading.Event(), threading.Event()
    with ThreadPoolExecutor(4) as pool:
        flowing = pool.submit(_frames_of, engine, "w" * 200, None, started, cancelled=done)
        assert started.wait(30)
        try:
            yield pool
        finally:
            done.set()
            flowing.result(timeout=60)


def _until_waiting(engine: CsmEngine, n: int) -> None:
    """Until ``n`` requests wait in the engine's queue (30 s at most)."""
    deadline = time.monotonic() + 30
    while engine._pending.qsize() < n and time.monotonic() < deadline:
        time.sleep(0.005)


def test_greedy_frames_are_the_codes_of_transformers_generate(engine, model, monkeypatch):
    """End to end: the engine's frames of a text (prefill, slot steps, depth decoder) are the
    codes transformers' own CsmForConditionalGeneration.generate picks, greedily."""
    text, frames = "hi", []
    depth = engine._depth

    def recorded(hidden, n):
        codes = depth(hidden, n)
        frames.extend(
            codes[row].clone()
            for row in range(n)
            if engine._slots[row] is not None and engine._slots[row].text == text
        )
        return codes

    monkeypatch.setattr(engine, "_depth", recorded)
    assert len(_frames_of(engine, text)) == 5
    with torch.inference_mode():
        want = model.generate(
            input_ids=torch.tensor([engine._text_ids(text)]),
            max_new_tokens=5,
            min_new_tokens=5,
            do_sample=False,
            depth_decoder_do_sample=False,
        )
    assert torch.equal(torch.stack(frames), want[0])


def test_batching_does_not_change_a_requests_frames(engine):
    text = "batched"  # 7 characters * 0.07 s = 0.49 s: 6 frames of 80 ms
    alone = _frames_of(engine, text)
    assert [f.shape for f in alone] == [(FRAME,)] * 6
    assert len({f.tobytes() for f in alone}) == 6  # each frame its own samples
    before = engine.steps
    first_in, mine_in, done = threading.Event(), threading.Event(), threading.Event()
    with ThreadPoolExecutor(3) as pool:  # slot 0 runs until the others are done; mine joins at its
        # 2nd frame (slot 1), the third at mine's 2nd (slot 2): a batch of 3 rows in a bucket of 4
        first = pool.submit(_frames_of, engine, "w" * 200, None, first_in, cancelled=done)
        mine = pool.submit(_frames_of, engine, text, first_in, mine_in)
        third = pool.submit(_frames_of, engine, "hi", mine_in)
        batched, short = mine.result(timeout=60), third.result(timeout=60)
        done.set()
        ran_on = len(first.result(timeout=60))
    assert len(short) == 5  # "hi": the 0.4 s floor of the length rule
    assert 6 + 5 <= ran_on < 175 and engine.steps - before < ran_on + 6 + 5  # they shared steps
    assert len(batched) == len(alone)
    for got, want in zip(batched, alone, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert _idle(engine)


def test_a_burst_is_prefilled_in_one_pass_with_the_same_frames(engine, monkeypatch):
    """Three requests waiting at once (a burst: BURST or more) share one right-padded prefill
    pass, and each speaks the frames it speaks alone; a lone arrival keeps its own prefill."""
    texts = ["one", "a longer text", "mid size"]
    alone = [_frames_of(engine, text) for text in texts]
    held, blocked, release = threading.Event(), threading.Event(), threading.Event()
    deliver = engine._deliver

    def held_deliver(*step):  # the GPU thread waits here (its admissions done) for the burst
        if held.is_set():
            blocked.set()
            assert release.wait(30)
        return deliver(*step)

    monkeypatch.setattr(engine, "_deliver", held_deliver)
    with _while_one_flows(engine) as pool:
        passes, prefills = engine.prefill_passes, engine.prefills
        held.set()
        assert blocked.wait(30)
        burst = [pool.submit(_frames_of, engine, text) for text in texts]
        _until_waiting(engine, 3)
        held.clear()
        release.set()
        got = [future.result(timeout=60) for future in burst]
    assert (engine.prefill_passes - passes, engine.prefills - prefills) == (1, 3)
    for frames, want in zip(got, alone, strict=True):
        assert len(frames) == len(want)
        for a, b in zip(frames, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert _idle(engine)


def test_a_request_that_comes_during_an_admission_waits_for_the_next_step(engine, monkeypatch):
    """An admission takes the requests waiting when it starts; one that arrives meanwhile
    waits for the next admission, and a step of those in flight comes between: launched (the
    admission before a step, then the one while it runs) or delivered (the one while a step runs,
    then the one before the next). A burst that kept coming would otherwise hold every stream
    without a frame until it ended."""
    events: list[str] = []
    prompt, launch, deliver = engine._checked_prompt, engine._launch, engine._deliver
    later: list = []

    def logged_prompt(request):
        events.append(f"prompt {request.text}")
        if request.text == "first arrival":  # another request comes while this one is admitted
            later.append(threading.Thread(target=_frames_of, args=(engine, "came meanwhile")))
            later[0].start()
            _until_waiting(engine, 1)
        return prompt(request)

    def logged_launch(busy):
        events.append("launch")
        return launch(busy)

    def logged_deliver(*step):
        events.append("deliver")
        return deliver(*step)

    with _while_one_flows(engine) as pool:
        monkeypatch.setattr(engine, "_checked_prompt", logged_prompt)
        monkeypatch.setattr(engine, "_launch", logged_launch)
        monkeypatch.setattr(engine, "_deliver", logged_deliver)
        first = pool.submit(_frames_of, engine, "first arrival")
        assert len(first.result(timeout=60)) == 11  # 13 characters: 0.91 s
        later[0].join(60)
    prompts = [i for i, e in enumerate(events) if e.startswith("prompt")]
    assert [events[i] for i in prompts] == ["prompt first arrival", "prompt came meanwhile"]
    between = set(events[prompts[0] : prompts[1]])
    assert between & {"launch", "deliver"}, events  # a step of those in flight between
    assert _idle(engine)


def test_a_request_that_comes_during_a_step_is_in_the_next_step(engine, monkeypatch):
    """A request that comes while a step runs, after that step's admissions, is admitted before
    the next step is launched, and that step makes its first frame (admitted after the launch,
    its first frame would wait a step more)."""
    deliver, launch = engine._deliver, engine._launch
    armed, in_step, submitted = threading.Event(), threading.Event(), threading.Event()
    launched: list[list[str]] = []  # the texts of each step's rows, from the armed step on

    def held_deliver(*step):
        if armed.is_set() and not in_step.is_set():
            in_step.set()  # this step's admissions are over: the request comes now
            assert submitted.wait(30)
        return deliver(*step)

    def logged_launch(busy):
        if in_step.is_set():
            launched.append([engine._slots[i].text for i in busy])
        return launch(busy)

    with _while_one_flows(engine) as pool:
        monkeypatch.setattr(engine, "_deliver", held_deliver)
        monkeypatch.setattr(engine, "_launch", logged_launch)
        armed.set()
        assert in_step.wait(30)
        late = pool.submit(_frames_of, engine, "came during a step")
        _until_waiting(engine, 1)
        submitted.set()
        assert len(late.result(timeout=60)) > 0
    assert "came during a step" in launched[0]  # the very next step
    assert _idle(engine)


def test_stage_marks_log_each_requests_first_frame_and_server_stages_sums_them(
    model, monkeypatch, caplog, tmp_path
):
    """FDB_STAGE_MARKS=1: one line a request at its first frame (its wait for a slot, and from
    its prefill), none without; benchmarks/server_stages.py reads them back from the log."""
    from benchmarks.server_stages import csm_first_frames

    def first_frame_lines(marks: bool) -> list[str]:
        if marks:
            monkeypatch.setenv("FDB_STAGE_MARKS", "1")
        else:
            monkeypatch.delenv("FDB_STAGE_MARKS", raising=False)
        caplog.clear()
        engine = CsmEngine(model, CsmOptions(max_batch=2, max_len=256, temperature=0), dummy=True)
        try:
            with caplog.at_level("INFO", logger="fdb.serving"), ThreadPoolExecutor(3) as pool:
                texts = ["one", "two words", "and three"]  # three requests, two slots: one waits
                assert all(
                    f.result(60) for f in [pool.submit(_frames_of, engine, t) for t in texts]
                )
        finally:
            engine.close()
        return [r.getMessage() for r in caplog.records if "csm first frame" in r.getMessage()]

    assert first_frame_lines(False) == []
    lines = first_frame_lines(True)
    assert len(lines) == 3
    log = tmp_path / "server.log"
    log.write_text("".join(f"2026-12-06 INFO fdb.serving: {line}\n" for line in lines))
    summary = csm_first_frames(log)
    assert [summary[k]["requests"] for k in ("waited", "prefill", "total")] == [3, 3, 3]
    assert summary["total"]["max"] >= summary["total"]["p90"] >= summary["total"]["p50"] > 0
    assert summary["total"]["p50"] >= summary["prefill"]["p50"]
    (tmp_path / "quiet.log").write_text("nothing here\n")
    assert csm_first_frames(tmp_path / "quiet.log") is None


def test_a_failed_device_ends_every_request_in_flight_and_waiting_with_an_error(model):
    """A step that fails on a broken device (a CUDA error: every later device write fails too)
    ends the requests in flight and those waiting with the error, none left waiting, and the
    GPU thread never dies with an unhandled exception."""

    class Broken:  # a device tensor after a sticky CUDA error
        def __getitem__(self, index):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        def __setitem__(self, index, value):
            self[index]

    engine = CsmEngine(model, CsmOptions(max_batch=1, max_len=256, temperature=0), dummy=True)
    running = threading.Event()
    outcome: dict[str, str] = {}

    def drain(name: str, text: str, tell: threading.Event | None = None) -> None:
        try:
            for n, _ in enumerate(engine.stream(text), 1):
                if tell is not None and n == 2:
                    tell.set()
            outcome[name] = "ended"
        except FdbError as exc:
            outcome[name] = exc.one_line()

    threads = [threading.Thread(target=drain, args=("busy", "w" * 100, running), daemon=True)]
    threads[0].start()
    try:
        assert running.wait(30)
        launch = engine._launch

        def broken_launch(busy):
            engine.live = Broken()
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        engine._launch = broken_launch
        threads.append(threading.Thread(target=drain, args=("waiting", "hello"), daemon=True))
        threads[1].start()  # no free slot (max_batch 1): it waits
        for thread in threads:
            thread.join(30)
        assert not any(t.is_alive() for t in threads)
        assert outcome["busy"].startswith("CSM generation failed: CUDA error")
        # the device's error, whether its admission's write failed in a step or in the thread
        # (which then ends, its failure logged, not left to the interpreter's thread hook)
        assert "CUDA error" in outcome["waiting"], outcome["waiting"]
    finally:
        engine._launch = launch
        engine.close()


def test_a_gpu_thread_that_fails_ends_every_request_with_its_failure(model, caplog):
    """A GPU thread that fails outside a step (here its admission) logs the failure with its
    traceback and ends: the request it was admitting and every later one end with that failure,
    each with an error of its own (one raised in many threads would pile up their frames)."""
    engine = CsmEngine(model, CsmOptions(max_batch=1, max_len=256, temperature=0), dummy=True)
    try:

        def failing_admit():
            raise RuntimeError("CUDA error: unspecified launch failure")

        engine._admit = failing_admit
        errors = []
        for text in ("first", "later"):
            with pytest.raises(FdbError) as caught:
                list(engine.stream(text))
            errors.append(caught.value)
        assert [e.one_line() for e in errors] == [
            "CSM failed: CUDA error: unspecified launch failure (see the server log; restart it)"
        ] * 2
        assert errors[0] is not errors[1]
        assert "the GPU thread failed" in caplog.text
        assert not engine._thread.is_alive()
    finally:
        engine.close()


def test_a_cancelled_stream_stops_early_and_frees_its_slot(engine):
    stop = threading.Event()
    frames = []
    for frame in engine.stream("x" * 200, cancelled=stop):  # 175 frames if it ran on
        frames.append(frame)
        if len(frames) == 2:
            stop.set()
    assert 2 <= len(frames) < 10
    assert _idle(engine)
    left = engine.stream("y" * 200)  # leaving the stream (a client that went away) cancels too
    next(left)
    left.close()
    assert _idle(engine)


def test_both_codecs_speak_whole_frames_and_a_reference_primes_the_stream(model, engine):
    """codec window (transformers' Mimi over the last frames) and streaming (the default, the
    slot's own decoder stream): the same frames of the same codes (greedy), audio of the same
    shape; with streaming, a request with a reference (primed into its decoder stream) too."""
    window = CsmEngine(
        model, CsmOptions(max_batch=2, max_len=256, temperature=0, codec="window"), dummy=True
    )
    try:
        windowed = list(window.stream("hi"))
    finally:
        window.close()
    streamed = list(engine.stream("hi"))
    assert (
        engine.identity.settings["codec"] == "streaming"
        and window.identity.settings["codec"] == "window"
    )
    assert [f.shape for f in windowed] == [f.shape for f in streamed] == [(FRAME,)] * 5
    reference = np.random.default_rng(5).normal(0, 0.1, 24000).astype(np.float32)
    primed = list(engine.stream("hi", ref_audio=reference, ref_text="noise"))
    assert [f.shape for f in primed] == [(FRAME,)] * 5
    assert _idle(engine)


class _Streaming:
    """The speech node's view of CsmTts (serving/gpu/nodes.py) over the module's engine."""

    rate = 24000

    def __init__(self, engine: CsmEngine):
        self.astream = engine.astream


def _speech_node(engine: CsmEngine):
    from serving.graph.kinds import PiperSpeechOptions
    from serving.graph.nodes import PiperSpeechNode
    from serving.hub import ModelHub

    options = PiperSpeechOptions()
    models = ModelHub(tts=_Streaming(engine))  # the default voice
    return PiperSpeechNode(models, options)


def test_the_speech_node_sends_each_csm_frame_as_it_is_made(engine):
    """The graph's speech node streams a streaming backend's frames: turn.started, one pcm chunk
    per 80 ms frame (the first before the chunk's last frame is made), then reply.progress with
    the chunk's audio; an interruption mid-chunk (preempt: the task is cancelled) frees the slot."""
    import asyncio

    from serving.graph.streams import Chunk, TextDelta, control

    async def main():
        node = _speech_node(engine)
        await node.open()
        sent = []

        async def emit(chunk):
            sent.append(
                (
                    chunk.control,
                    None if chunk.format != "pcm_f32le" else len(chunk.payload.samples),
                    engine._slots[0] is not None,
                )
            )

        await node.on_chunk(Chunk("text_delta", TextDelta("Hello there friend. "), turn=1), emit)
        await node.on_chunk(control("turn.done", turn=1), emit)
        # an interrupted long chunk: cancelled after its second frame
        before = len(sent)
        task = asyncio.ensure_future(
            node.on_chunk(Chunk("text_delta", TextDelta("z" * 150 + ". "), turn=2), emit)
        )
        while sum(1 for c, n, _ in sent[before:] if n) < 2:
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return sent

    sent = asyncio.run(main())
    end = [c for c, _, _ in sent].index("turn.done")
    first, second = sent[:end], sent[end + 1 :]
    frames = [n for c, n, _ in first if n]
    assert first[0][0] == "turn.started" and first[-1][0] == "reply.progress"
    assert frames == [FRAME] * 17  # "Hello there friend.": 19 characters * 0.07 s = 1.33 s
    assert any(
        busy for c, n, busy in first if n
    )  # a frame went out while the request was generating
    assert [c for c, _, _ in first].count("reply.progress") == 1
    assert second[0][0] == "turn.started" and 2 <= sum(1 for _, n, _ in second if n) < 10
    assert "reply.progress" not in [c for c, _, _ in second]  # cancelled: the chunk never finished
    assert _idle(engine)  # the cancelled request left its slot


def test_a_first_chunk_spoken_ahead_is_the_turns_first_audio_when_its_text_is_the_same(engine):
    """speech.prefetch (a reply made ahead at a pause announces its first chunk) starts that
    chunk's synthesis at once; the next turn's first chunk with the same text takes its frames,
    those made ahead first, without a synthesis of its own, and sends them only as that turn's.
    Another text stops it (its slot freed), as does a withdrawal (text None)."""
    import asyncio

    from serving.graph.streams import Chunk, TextDelta, control

    text = "Hello there friend."
    fresh = [f.copy() for f in engine.stream(text)]  # temperature 0: the same frames each time

    async def turn(node, n: int, said: str, sent: list) -> None:
        async def emit(chunk):
            if chunk.turn == n:
                sent.append(chunk)

        await node.on_chunk(Chunk("text_delta", TextDelta(said + " "), turn=n), emit)
        await node.on_chunk(control("turn.done", turn=n), emit)

    async def nothing(chunk):
        raise AssertionError(f"sent ahead of its turn: {chunk}")

    async def main():
        node = _speech_node(engine)
        await node.open()
        prefills = engine.prefills
        await node.on_control(control("speech.prefetch", text=text), nothing)
        ahead = node._ahead.item
        while len(ahead.items) < 3:  # made ahead, none sent
            await asyncio.sleep(0.005)
        claimed: list = []
        await turn(node, 1, text, claimed)
        one_request = engine.prefills - prefills
        # a different first chunk: the audio made ahead stops, the turn synthesizes its own
        await node.on_control(control("speech.prefetch", text="Something else entirely."), nothing)
        other = node._ahead.item
        while not other.items:
            await asyncio.sleep(0.005)
        mismatched: list = []
        await turn(node, 2, text, mismatched)
        await asyncio.gather(other.task, return_exceptions=True)
        # withdrawn: stopped, nothing claimed
        await node.on_control(control("speech.prefetch", text=text), nothing)
        withdrawn = node._ahead.item
        await node.on_control(control("speech.prefetch", text=None), nothing)
        await asyncio.gather(withdrawn.task, return_exceptions=True)
        await node.close()
        return node, claimed, one_request, mismatched, other, withdrawn

    node, claimed, one_request, mismatched, other, withdrawn = asyncio.run(main())
    assert node.spoken_ahead == {"started": 3, "claimed": 1} and node._ahead.item is None
    assert one_request == 1  # the turn's chunk made no request of its own
    for sent, exact in ((claimed, True), (mismatched, False)):
        kinds = [c.control or c.format for c in sent]
        assert kinds[:3] == ["turn.started", "reply.chunk", "pcm_f32le"]
        assert kinds[-2:] == ["reply.progress", "turn.done"]
        audio = [c.payload.samples for c in sent if c.format == "pcm_f32le"]
        assert len(audio) == len(fresh) == 17
        # the claimed frames are those of a synthesis alone; the turn of its own shared its
        # steps with the stopped one ahead (another batch size: float sums in another order)
        same = np.array_equal if exact else functools.partial(np.allclose, atol=1e-4)
        assert all(same(a, f) for a, f in zip(audio, fresh, strict=True))
    assert other.task.cancelled() and withdrawn.task.cancelled()
    assert len(other.items) < 17  # stopped before its chunk's end
    assert _idle(engine)


def _ending(engine: CsmEngine, text: str, frame: int):
    """``engine._depth`` with ``text``'s frame number ``frame`` made the end frame (every
    codebook ``codebook_eos_token_id``); counted by launches, as a step computes it (with
    overlap the frames read lag one step behind)."""
    depth = engine._depth

    def ending(hidden, n):
        codes = depth(hidden, n)
        for row in range(n):
            request = engine._slots[row]
            if request is not None and request.text == text and request.launched == frame - 1:
                codes[row] = engine.model.config.codebook_eos_token_id
        return codes

    return ending


def test_the_end_frame_ends_its_request_unspoken(engine, monkeypatch):
    """All codebooks codebook_eos_token_id (0): that request ends, without the end frame's audio
    (transformers' generate cuts there); the other row goes on."""
    monkeypatch.setattr(engine, "_depth", _ending(engine, "ends early", 3))
    running = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(_frames_of, engine, "hello there", None, running)
        assert running.wait(30)
        assert len(_frames_of(engine, "ends early")) == 2
        assert len(other.result(timeout=60)) == 10
    assert _idle(engine)


def test_a_too_long_prompt_fails_that_request_only(engine):
    running = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(_frames_of, engine, "hello there", None, running)
        assert running.wait(30)
        with pytest.raises(FdbError) as raised:
            list(engine.stream("z" * 300))
        assert (
            len(other.result(timeout=60)) == 10
        )  # 11 characters: 0.77 s -> 10 frames, undisturbed
    assert raised.value.one_line() == (
        "the prompt is 300 tokens, the engine holds 256 "
        "(send a shorter reference or text, or raise max_len)"
    )


def test_max_len_bounds_a_request_and_closing_ends_its_streams_with_an_error(model):
    engine = CsmEngine(model, CsmOptions(max_batch=1, max_len=64, temperature=0), dummy=True)
    # 40 prompt tokens: positions 39..62 hold its frames (24), short of the 35 of the length rule
    assert len(list(engine.stream("q" * 40))) == 24
    stream = engine.stream("w" * 40)
    next(stream)
    waiting = engine.stream("waits for the slot")
    outcome: dict[str, object] = {}

    def drain(name, frames) -> None:
        try:
            outcome[name] = len(list(frames))
        except FdbError as exc:
            outcome[name] = exc.one_line()

    threads = [
        threading.Thread(target=drain, args=(n, s), daemon=True)
        for n, s in (("busy", stream), ("waiting", waiting))
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    engine.close()
    for thread in threads:
        thread.join(5)
    assert outcome == {
        "busy": "the CSM engine is closed (the server is stopping)",
        "waiting": "the CSM engine is closed (the server is stopping)",
    }
    with pytest.raises(FdbError, match="closed"):
        next(engine.stream("after"))


def test_the_overlapped_loop_speaks_the_plain_loops_frames_and_stays_inside_the_cache(model):
    """The loop that launches the next step before it reads the last (overlap, the default)
    gives each request the frames the plain loop gives it: a request bounded by max_len beside
    others (its last frame at the cache's last position: no step is launched past it), one that
    ends at an end frame (one more step was launched for it, and nobody reads it) and one that
    waits for a slot and takes the freed one while that step is still unread."""

    def speak(overlap: bool) -> dict[str, list[np.ndarray]]:
        engine = CsmEngine(
            model,
            CsmOptions(max_batch=2, max_len=64, temperature=0, overlap=overlap),
            dummy=True,
        )
        engine._depth = _ending(engine, "ends early", 4)
        texts = ["q" * 40, "ends early", "waits for a slot"]
        try:
            with ThreadPoolExecutor(3) as pool:
                running = threading.Event()
                futures = {texts[0]: pool.submit(_frames_of, engine, texts[0], None, running)}
                assert running.wait(30)
                for text in texts[1:]:
                    futures[text] = pool.submit(_frames_of, engine, text)
                    _until_waiting(engine, 0)
                return {text: future.result(timeout=60) for text, future in futures.items()}
        finally:
            assert _idle(engine)
            engine.close()

    overlapped, plain = speak(True), speak(False)
    # 40 prompt tokens: positions 39..62 (24 frames); the end frame (the 4th) is not spoken;
    # 16 characters: 1.12 s, 14 frames
    counts = {"q" * 40: 24, "ends early": 3, "waits for a slot": 14}
    assert {text: len(frames) for text, frames in plain.items()} == counts
    assert {text: len(frames) for text, frames in overlapped.items()} == counts
    for text, frames in plain.items():
        for got, want in zip(overlapped[text], frames, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


# --- the speech endpoint of a tiny csm_gpu server -------------------------------------------------


def _wav_uri(seconds: float, rate: int = 16000) -> str:
    import soundfile as sf

    noise = np.random.default_rng(3).normal(0, 0.1, int(seconds * rate)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, noise, rate, format="WAV", subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    import yaml
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.systems import load_config_file

    launch = tmp_path_factory.mktemp("gputts") / "launch.yaml"
    tts = {
        "kind": "csm_gpu",
        "device": "cpu",
        "dtype": "float32",
        "max_batch": 4,
        "max_len": 256,
        "weights": {"load_format": "dummy", "preset": "csm-1b", "overrides": TINY},
    }
    launch.write_text(
        yaml.safe_dump(
            {
                "system": "gpu-tts",
                "name": "gpu-tts-tiny",
                "model": "fdb/gpu-tts-tiny",
                "backends": {"tts": tts},
            }
        )
    )
    app = create_app(load_config_file(launch))
    with TestClient(app) as client:  # the lifespan loads the models
        deadline = time.monotonic() + 120
        while (health := client.get("/health")).status_code != 200:
            assert health.json()["status"] == "starting" and time.monotonic() < deadline, (
                health.json()
            )
            time.sleep(0.1)
        yield client
    assert (
        not app.state.runtime.hub.tts.engine._thread.is_alive()
    )  # the server's stop closed the engine


def test_speech_clones_from_ref_audio_in_whole_frames(client):
    body = {
        "input": "Hi there.",
        "ref_audio": _wav_uri(1.0),
        "ref_text": "some noise",
        "stream": True,
        "response_format": "pcm",
    }
    reply = client.post("/v1/audio/speech", json=body)
    assert reply.status_code == 200, reply.text
    assert (
        reply.headers["content-type"] == "audio/pcm" and reply.headers["x-sample-rate"] == "24000"
    )
    assert len(reply.content) == 8 * FRAME * 2  # 9 characters: 0.63 s -> 8 frames of PCM16

    bad = client.post(
        "/v1/audio/speech", json={**body, "ref_audio": "data:audio/wav;base64,bm90IGEgd2F2"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_ref_audio"
    assert bad.json()["error"]["param"] == "ref_audio"
    # the engine refuses a prompt past max_len (256) in its thread: still an error answer,
    # not an empty 200
    long = client.post("/v1/audio/speech", json={"input": "z" * 300, "stream": True})
    assert long.status_code == 400 and long.json()["error"] == {
        "type": "invalid_request_error",
        "code": "input_too_long",
        "param": "input",
        "message": (
            "the prompt is 300 tokens, the engine holds 256 (send a shorter reference or text, "
            "or raise max_len)"
        ),
    }


def test_capabilities_and_the_realtime_refusal_of_a_speech_only_server(client):
    from starlette.testclient import WebSocketDenialResponse

    speech = client.get("/v1/realtime/capabilities").json()["speech"]
    assert speech["backend"] == "csm_gpu" and speech["voice_cloning"] is True
    assert speech["weights"] == LABEL and speech["sample_rate"] == 24000
    assert client.get("/health").json()["backends"]["tts"]["settings"]["weights"] == LABEL
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect("/v1/realtime"):
            pass
    assert denied.value.status_code == 503
    assert denied.value.json()["error"]["code"] == "realtime_unavailable"


def test_a_prompt_prefilled_right_padded_to_its_length_bucket_speaks_the_same_frames(model):
    """The padded prefill that CUDA runs as one graph per length (``prefill_lengths``; on a CPU
    run eagerly through the same buffers): each request's frames equal those of its exact-length
    prefill, alone and in a burst, and a prompt longer than every bucket keeps the eager pass."""
    exact = CsmEngine(
        model, CsmOptions(max_batch=4, max_len=256, temperature=0), dummy=True, weights_label=LABEL
    )
    padded = CsmEngine(
        model,
        CsmOptions(max_batch=4, max_len=256, temperature=0, prefill_lengths=(8, 16)),
        dummy=True,
        weights_label=LABEL,
    )
    try:
        assert exact.padded.lengths == ()  # no CUDA here: no prefill lengths unless asked
        texts = ["one", "a longer text", "a text of more than sixteen bytes"]
        want = [_frames_of(exact, text) for text in texts]
        with ThreadPoolExecutor(3) as pool:
            got = list(pool.map(lambda text: _frames_of(padded, text), texts))
        assert sorted(padded.padded._passes) == [8, 16]  # the longest text took the eager pass
        for frames, expected in zip(got, want, strict=True):
            assert len(frames) == len(expected)
            for a, b in zip(frames, expected, strict=True):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
        assert _idle(padded)
    finally:
        exact.close()
        padded.close()
