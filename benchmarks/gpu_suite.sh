#!/usr/bin/env bash
# The GPU measurements of docs/gpu.md, in the order that page gives, on one CUDA machine.
#
#   benchmarks/gpu_suite.sh OUT PART [WHEELS] [DATASETS]
#
# PART is one of:
#   codec-native  gpu_mimi (Moshi's 8 and CSM's 32 codebooks), gpu_native with the streaming codec
#                 at 8,16,32 sessions, the window codec at 16 (the A/B), then the CUDA tests
#   tts-cascade   gpu_tts at C1,4,16,64 (streaming codec), gpu_cascade at 16,32 sessions with a
#                 200 ms silence, and gpu_tts's step profile with the window codec (the A/B)
#   followup      gpu_tts at C1 and C16 with 64 requests a level (steady state; the profile with a
#                 request's prefill), the reply model's
#                 CUDA graphs on and off (the CUDA tests), gpu_cascade at 16 with the stages of its
#                 first audio (cascade_stages.py), gpu_native at 24
#   tts           gpu_tts at C1,4,16,64 with 64 requests a level
#   asr           gpu_whisper (static decoder against generate, part by part), the Whisper CUDA
#                 tests (both decoders), gpu_cascade at 16,32 sessions with a 200 ms silence and
#                 the stages of its first audio (cascade_stages.py)
#   engines       the CUDA tests (Whisper's decoders, the reply model's engines), gpu_cascade at
#                 16,32 with its stages, then at 16 with the old paths (generate, continuous
#                 batching: the same-card A/B), then gpu_tts at C1 and C16
#   verify        gpu_whisper (with the engine's own path, on its stream), the Whisper CUDA tests,
#                 gpu_tts at C1 and C16 (CSM's batched admission and its own stream)
#   stream        gpu_cascade at 16,32 with its stages (a chunk's audio streamed as it is made),
#                 gpu_native at 16,32 (Moshi as a session-graph node)
#   window        gpu_whisper (a 10 s window against 30 s), gpu_cascade at 16,32 with its stages
#                 and the server's stage marks (server_stages.py), the same with prefetch_ms 100,
#                 gpu_native at 16,32 (the temporal transformer's length buckets)
#   burst         gpu_cascade at 16,32 with its stages and stage marks (CSM's burst admission),
#                 then gpu_tts at C1,16,64 with 64 requests a level
#   gc            gpu_cascade at 16 with stage marks, the loaded objects not frozen
#                 (FDB_GC_FREEZE=0), then frozen (the default): the first wave's stall
#   vad           vad_batch.py on cuda, the silero CUDA test, then gpu_cascade at 32 with the CPU
#                 vad stage and with silero_gpu on cuda (the A/B), stage marks on
#   stagger       gpu_cascade at 32 with stage marks: every session's question at once (the
#                 burst of the parts above), then the sessions' phases spread over 4 s
#                 (--stagger-s 4), the same with prefetch_ms 100, and spread over 8 s with it
#   diag          gpu_cascade at 32 at once, spread over 4 s, spread with silero_gpu, and that
#                 with a 0.5 ms thread switch interval (FDB_SWITCH_INTERVAL_MS), each with every
#                 server thread's stack sampled (FDB_STACK_SAMPLES) and CSM's first frames
#                 logged: where a first reply waits
#   prefill       the CUDA tests of the prefill graphs (CSM, the reply model) and Whisper's encoder
#                 graphs, gpu_cascade at 32 spread over 4 s without (--no-graphs) and with them,
#                 with them and prefetch_ms 100, then 50 (a reply and its first chunk's audio
#                 made ahead at a pause; stage marks, stacks sampled)
#   admit         the CUDA tests of the prefill graphs (CSM's and the reply model's engines),
#                 gpu_cascade at 32 spread over 4 s with prefetch_ms 50, gpu_tts at C1 and C16
#                 (32 requests a level), the cascade spread without prefetch, at once with 50
#   priority      the CUDA tests of the prefill graphs, then gpu_cascade at 32 spread over 4 s with
#                 prefetch_ms 50 at CUDA's default stream priority for every engine, with CSM the
#                 most urgent (tts=-5), with the recognizer and the reply model the most urgent,
#                 each twice, interleaved (each engine on its own stream)
#   transcript    the CUDA tests of the graphs and the engines' streams, then
#                 gpu_cascade at 32 spread over 4 s with prefetch_ms 50 with the recognizer's
#                 bound as it is (8 tokens a second) and at 4 (a real transcript's length; dummy
#                 weights never end one), twice, interleaved; then 4 with prefetch_ms 32 (one
#                 Silero frame, the least allowed), and 4 with every session at once
#   calibrated    gpu_cascade at 32 spread over 4 s with the recognizer's bound at 5 tokens a
#                 second (this dataset's real transcripts) and prefetch_ms 50 and 32, twice,
#                 interleaved; then 32 at 4 tokens a second, and 32 at 5 with every session at once
#   firstchunk    gpu_cascade at 32 spread over 4 s, 5 tokens a second, prefetch_ms 50, with the
#                 first chunk's rule at most 7 words (the default) and 4, three times, interleaved;
#                 then 4 with every session at once
#   overlap       the CUDA tests of the overlapped decode loops and the prefill graphs, then
#                 gpu_cascade at 32 spread over 4 s, 5 tokens a second, prefetch_ms 50, with the
#                 recognizer's and the reply model's loops overlapped (the default) and not
#                 (--no-overlap), three each, in the order on off off on on off
#   prompt        gpu_whisper at 1 and 4 utterances (Whisper's forced prompt in one pass against a
#                 step a token), the CUDA tests of the overlapped loops and the pass, then
#                 gpu_cascade at 32 as in overlap: a warming run, then the first chunk at most 7
#                 words and 4, three each, in the order 7 4 4 7 7 4
#   levels        gpu_cascade at 16, 24 and 32 sessions against one server (spread over 4 s, 5
#                 tokens a second, prefetch_ms 50): the most sessions meeting the first audio goal
#   sink          levels again, then gpu_cascade at 32 as in prompt with the first chunk at most
#                 4 words and 7, in the order 4 7 7 4 (a streamed reply's frames leave as made)
#   csmoverlap    a warming run, then gpu_cascade at 32 as in sink with CSM's loop plain (the
#                 default since the ninth session) and overlapped (--csm-overlap), three each, in
#                 the order off on on off off on
#   lanes         the CUDA test of Whisper's lanes, a warming run, then gpu_cascade at 32 as in
#                 sink with the recognizer's batches on two lanes (gpu-cascade's default since
#                 the tenth session) and one (--asr-lanes 1), three each, in the order 1 2 2 1 1 2;
#                 the server's stage marks give each Whisper batch's wait and run time
#                 (server_stages.py, "batches")
#   sessions      the CUDA test of Whisper's lanes, gpu_graph_workspace (graphs captured in one
#                 thread replayed at once), a warming run, gpu_cascade at 32 twice, then at 16,
#                 24, 32, 40 and 48 sessions against one server (as in levels, 48 sessions a
#                 level): the defaults only
#   lanescheck    the CUDA tests of Whisper's lanes (each concurrent transcript against its lane's
#                 alone) and of capture's owners, and gpu_graph_workspace (graphs captured in one
#                 thread, in live threads, in threads that ended, in one thread on a capture
#                 stream each), nothing else
#   check         every CUDA test (test_gpu_cuda.py, test_mimi_static.py) and gpu_graph_workspace:
#                 the final code's checks on a card (the eleventh session)
#   final         each system once on the final code: a warming run, gpu_cascade at 32 twice (as
#                 in sessions), gpu_tts at C1 and C16 (32 requests a level), gpu_native at 16
#   last          check, then final: one 10-minute call
#   decide        final, then the step timed with the cross-attention on the memory-efficient
#                 kernel (the engine's) and on flash attention (gpu_step_repeat.py --cross,
#                 interleaved, twice), and flash attention's passes traced in the lanes' threads
#   flash         the engine's cross-attention kernels by rows (flash attention up to 4): the
#                 cascade at 32 (a warming run, then two), every CUDA test in one process, the
#                 passes traced (calling thread, lanes' threads), the step timed at buckets 1-16
#                 against the memory-efficient kernel alone, then a third cascade run
#   crossab       every CUDA test in one process, then gpu_cascade at 32 (as in final) with the
#                 engine's kernels against the memory-efficient kernel alone
#                 (FDB_WHISPER_CROSS=efficient): flash efficient efficient flash, no warming
#                 run (the machine's first cascade is flash's)
#   streams       every CUDA test three times, each stream's holder logged (stream_log.py):
#                 the code as it is, the code before from .old/slots.py if carried (streams
#                 drawn from torch's pool: git show e8abbd7:serving/gpu/slots.py), the code
#                 as it is again
#   bisect        the lanes' CUDA test after every other CUDA test without cuBLAS workspaces
#                 (CUBLAS_WORKSPACE_CONFIG=:0:0), after the Whisper tests alone, and after
#                 every test but Whisper's, and alone with random bytes in the allocator's free
#                 blocks (dirty_memory.py), each in a process of its own (fourteenth session)
#   bisect2       the lanes' CUDA test alone, then after each Whisper CUDA test before it (the
#                 static decoder, generate, the encoder's graphs), each pair in a process of its
#                 own: which one leaves the state that makes a lane's passes differ
#   thread        gpu_whisper_repeat with two lanes, the passes in each lane's thread and in the
#                 calling thread (as the lanes' test runs them), the lanes' test alone, the same
#                 two on the code before the streams were made here (.old/slots.py, if carried),
#                 and one lane in the calling thread
#   inlane        every CUDA test in one process (a lane's batches in its own thread whoever
#                 calls), gpu_whisper_repeat with the lanes' work in the calling thread: as it
#                 is, the device synchronized before each call, without the overlapped loop,
#                 without graphs; then in each lane's thread; every CUDA test again
#   cache         whether torch has TORCH_CUBLAS_WORKSPACE_CACHE, gpu_whisper_repeat with the
#                 lanes' work in the calling thread without and with it (interleaved, twice),
#                 then every CUDA test in one process with it, twice
#   step          one Whisper decoder step replayed 200 times from the same state
#                 (gpu_step_repeat.py): captured as it is in the calling thread and the lane's,
#                 eager, with the math attention, with the memory-efficient kernel only, with
#                 cuBLAS and with cuBLASLt for the matrix products, with torch's deterministic
#                 algorithms, and the forced prompt's pass: the first layer output that differs
#                 from one replay to the next
#   trace         every graph replay of a Whisper lane's passes traced (gpu_whisper_trace.py):
#                 with each layer's intermediate results probed, as it is, with the math
#                 attention, twice over; then in the lanes' threads, each call from a zeroed
#                 cache, one lane: the first value a pass has different from the first pass
#   cross         the cross-attention's kernel the engine chooses, traced as in trace, against
#                 torch's own choice (flash, cudnn); every CUDA test in one process; the step's
#                 time with it and torch's choice (gpu_step_repeat.py --cross, interleaved, twice)
#   repeat        which cuBLAS workspace map this torch has, every CUDA test, then whether
#                 Whisper gives an utterance the same tokens every time (gpu_whisper_repeat.py:
#                 one lane without graphs, one, two lanes, one with its encoder eager, one
#                 without the overlapped loop, two in float32, each in a process of its own;
#                 each places a difference in the encoder or the decoder), then the lanes' test
# WHEELS (default .whl) holds the wheels the machine lacks; DATASETS (default .devdata) holds
# cascade-ds (benchmarks/cascade_capacity.synthetic_tree) and synth-tts/seedtts (docs/gpu.md).
# Each step has its own time limit, so one that hangs costs only its own share; OUT/steps.txt has
# one line a step (exit code, seconds), and OUT/results.tgz every summary and log, rewritten after
# each step, so whatever finished comes back even when the whole command is cut off.
set -u
OUT=${1:?usage: gpu_suite.sh OUT PART [WHEELS] [DATASETS]}
PART=${2:?usage: gpu_suite.sh OUT PART [WHEELS] [DATASETS]}
WHEELS=${3:-.whl}
DATA=${4:-.devdata}
RES=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d "$WHEELS" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl >"$RES/pip.log" 2>&1 || {
        echo "wheel install failed"
        tail -5 "$RES/pip.log"
        exit 1
    }
    export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi >"$RES/nvidia-smi.txt" 2>&1
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)' \
    >"$RES/versions.txt" 2>&1
# the sources this run executed (a device's copy of the tree may carry stale git metadata), with
# the listing it is made of: benchmarks/sources_sha.py --root DIR recomputes it from a commit
echo "$(python3 benchmarks/sources_sha.py --list "$RES/sources.txt")  sources sha256" \
    >>"$RES/versions.txt"

pack() {  # audio stays behind: 16 MiB a file comes back at most
    cp "${FDB_HOME:-$HOME/fdb}/logs/fdb-debug.log" "$RES/" 2>/dev/null
    tar -czf "$OUT/results.tgz.part" --exclude="*.wav" --exclude="*.pcm" --exclude="*.png" --exclude="trace.jsonl" \
        -C "$RES" . && mv "$OUT/results.tgz.part" "$OUT/results.tgz"; }

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2 started rc
    shift 2
    started=$(date +%s)
    timeout -k 15 "$limit" "$@" >"$RES/$name.log" 2>&1
    rc=$?
    pkill -f "fdb serve" 2>/dev/null  # a server a killed benchmark left (it stops its own)
    echo "$name rc=$rc $(($(date +%s) - started))s" | tee -a "$OUT/steps.txt"
    tail -4 "$RES/$name.log"
    pack
}

summarize_cross() {  # a line a trace and a step timing: kernel, divergences, times
    for f in "$RES"/trace-*.json; do
        echo "$f: $(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(d['options']['cross_kernels'], d['transcripts_differ'], d['weights_changed'], \
[sorted({(w['kind'], w.get('output')) for p in lane for w in p.values()}) \
for lane in d['diverged'].values()])" "$f")"
    done
    for f in "$RES"/step-*.json; do
        echo "$f: $(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(d['options']['cross_kernels'], d['differ'], d['step_ms'])" "$f")"
    done
}

cascade32() {  # cascade32 NAME LIMIT ENV ARGS: gpu_cascade.py at 32 sessions (200 ms of silence)
    # with the server's variables ENV and its own ARGS, then the server's stage marks summed
    local name=$1 limit=$2 env=$3 args=$4
    step cascade-$name "$limit" bash -c "$env python3 benchmarks/gpu_cascade.py \
        --out $RES/cascade-$name --levels 32 --dataset $DATA/cascade-ds $args \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/server_stages.py $RES/cascade-$name/sweep/logs/model-server.log \
            --per 32 --out $RES/server-stages-$name.json"
}

rounds() {  # rounds N LIMIT NAME ARGS [NAME ARGS]...: cascade32 with each NAME's ARGS (stage
    # marks on), N rounds with the runs interleaved; each NAME gets the round's number
    local n=$1 limit=$2 round i
    shift 2
    (($# % 2 == 0)) || { echo "rounds: NAME ARGS pairs expected" >&2; return 2; }
    local pairs=("$@")
    for round in $(seq 1 "$n"); do
        for ((i = 0; i < ${#pairs[@]}; i += 2)); do
            cascade32 "${pairs[i]}-$round" "$limit" FDB_STAGE_MARKS=1 "${pairs[i + 1]}"
        done
    done
}

# the cascade's configuration since the sixth session: spread over 4 s, a pause's reply at 50 ms,
# the recognizer's bound at a real transcript's length
SPREAD="--stagger-s 4 --prefetch-ms 50 --asr-tokens-per-s 5"

alternate() {  # alternate ARGS SIDE FLAG RUN...: cascade32 s4-RUN with ARGS (stage marks on),
    # and FLAG too where RUN's name before its last dash is SIDE, in the order given
    local args=$1 side=$2 flag=$3 run
    shift 3
    for run in "$@"; do
        if [ "${run%-*}" = "$side" ]; then
            cascade32 "s4-$run" 90 FDB_STAGE_MARKS=1 "$args $flag"
        else
            cascade32 "s4-$run" 90 FDB_STAGE_MARKS=1 "$args"
        fi
    done
}

CUDA_TESTS="tests/serving/gpu/test_gpu_cuda.py tests/serving/gpu/test_mimi_static.py"
GPU_PYTEST="python3 -m pytest -m gpu -p no:cacheprovider -s"  # the CUDA tests, their prints shown

lanes_check() {  # the CUDA tests of Whisper's lanes and of capture's owners, then
    # gpu_graph_workspace (graphs of two lanes replayed at once, four ways of capturing them)
    step cuda-tests 120 $GPU_PYTEST -k "lanes or owner" \
        tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-tests.log"
    graph_workspace
}

graph_workspace() {  # gpu_graph_workspace.py: two lanes' graphs replayed at once, four ways
    step graph-workspace 90 python3 benchmarks/gpu_graph_workspace.py --rows 1,4 --reps 200 \
        --out "$RES/graph-workspace.json"
}


all_cuda_tests() {  # all_cuda_tests LIMIT: every CUDA test in one process
    step cuda-tests "$1" $GPU_PYTEST $CUDA_TESTS
    tail -1 "$RES/cuda-tests.log"
}

repeat_summary() {  # each gpu_whisper_repeat result of this call in one line: the passes
    # alone against the first, the encoder outputs that differ, the lanes alone, at once
    for f in "$RES"/repeat-*.json; do
        echo "$f: $(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(d['alone'], d['encoder_alone_differ'], d['lanes_alone_differ'], d['at_once'])" "$f")"
    done
}

logged_cuda_tests() {  # logged_cuda_tests NAME: every CUDA test in one process, each stream's
    # holder logged (benchmarks/stream_log.py) and a crash's Python stack printed
    step "$1" 150 env PYTHONFAULTHANDLER=1 $GPU_PYTEST \
        -p benchmarks.stream_log $CUDA_TESTS
    tail -1 "$RES/$1.log"
}

case "$PART" in
codec-native)
    step mimi-moshi 60 python3 benchmarks/gpu_mimi.py --device cuda --batch 16 --codebooks 8 \
        --reps 50 --out "$RES/mimi-moshi.json"
    step mimi-csm 50 python3 benchmarks/gpu_mimi.py --device cuda --batch 16 --codebooks 32 \
        --reps 50 --out "$RES/mimi-csm.json"
    step native 280 python3 benchmarks/gpu_native.py --out "$RES/native" --levels 8,16,32 \
        --dataset "$DATA/cascade-ds"
    step native-window 120 python3 benchmarks/gpu_native.py --out "$RES/native-window" \
        --levels 16 --dataset "$DATA/cascade-ds" --codec window --skip-profile
    step cuda-tests 80 $GPU_PYTEST \
        tests/serving/gpu/test_mimi_static.py tests/serving/gpu/test_gpu_cuda.py
    ;;
tts-cascade)
    step tts 260 python3 benchmarks/gpu_tts.py --out "$RES/tts" --seed-tts "$DATA/synth-tts/seedtts" \
        --concurrency 1,4,16,64 --num-prompts 32
    step cascade 240 python3 benchmarks/gpu_cascade.py --out "$RES/cascade" --levels 16,32 \
        --dataset "$DATA/cascade-ds" --turn-detection '{"type":"server_vad","silence_duration_ms":200}'
    step tts-window-profile 60 python3 benchmarks/gpu_tts.py --out "$RES/tts-window" \
        --codec window --batches 1,16,64 --concurrency 1 --num-prompts 8 \
        --seed-tts "$DATA/synth-tts/seedtts"
    ;;
followup)
    step tts-steady 190 python3 benchmarks/gpu_tts.py --out "$RES/tts-steady" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 64
    step cuda-chat 110 $GPU_PYTEST -k qwen3 \
        tests/serving/gpu/test_gpu_cuda.py
    step cascade-stages 170 bash -c "python3 benchmarks/gpu_cascade.py --out $RES/cascade16 \
        --levels 16 --dataset $DATA/cascade-ds \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade16/sweep --out $RES/stages.json"
    step native-24 110 python3 benchmarks/gpu_native.py --out "$RES/native-24" --levels 24 \
        --dataset "$DATA/cascade-ds" --skip-profile
    ;;
tts)
    step tts-final 280 python3 benchmarks/gpu_tts.py --out "$RES/tts-final" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,4,16,64 --num-prompts 64
    ;;
asr)
    step whisper 130 python3 benchmarks/gpu_whisper.py --device cuda --batches 1,16,32 \
        --tokens 24 --reps 3 --out "$RES/whisper.json"
    step cuda-tests 130 $GPU_PYTEST \
        tests/serving/gpu/test_gpu_cuda.py
    step cascade-stages 260 bash -c "python3 benchmarks/gpu_cascade.py --out $RES/cascade \
        --levels 16,32 --dataset $DATA/cascade-ds \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade/sweep --out $RES/stages.json"
    ;;
engines)
    step cuda-tests 100 $GPU_PYTEST \
        tests/serving/gpu/test_gpu_cuda.py
    step cascade-stages 150 bash -c "python3 benchmarks/gpu_cascade.py --out $RES/cascade \
        --levels 16,32 --dataset $DATA/cascade-ds \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade/sweep --out $RES/stages.json"
    step cascade-old 130 bash -c "python3 benchmarks/gpu_cascade.py --out $RES/cascade-old \
        --levels 16 --dataset $DATA/cascade-ds --asr-decoder generate \
        --llm-engine continuous_batching \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade-old/sweep --out $RES/stages-old.json"
    step tts 150 python3 benchmarks/gpu_tts.py --out "$RES/tts" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 64
    ;;
verify)
    step whisper 110 python3 benchmarks/gpu_whisper.py --device cuda --batches 1,16,32 \
        --tokens 24 --reps 3 --out "$RES/whisper.json"
    step cuda-whisper 60 $GPU_PYTEST -k whisper \
        tests/serving/gpu/test_gpu_cuda.py
    step tts 170 python3 benchmarks/gpu_tts.py --out "$RES/tts" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 64
    ;;
stream)
    step cascade-stages 170 bash -c "python3 benchmarks/gpu_cascade.py --out $RES/cascade \
        --levels 16,32 --dataset $DATA/cascade-ds \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade/sweep --out $RES/stages.json"
    step native 200 python3 benchmarks/gpu_native.py --out "$RES/native" --levels 16,32 \
        --dataset "$DATA/cascade-ds" --skip-profile
    ;;
window)
    step whisper 110 python3 benchmarks/gpu_whisper.py --device cuda --batches 1,16,32 \
        --tokens 24 --reps 3 --out "$RES/whisper.json"
    for pf in default 100; do
        extra=""
        [ "$pf" = default ] || extra="--prefetch-ms $pf"
        step cascade-$pf 170 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
            --out $RES/cascade-$pf --levels 16,32 --dataset $DATA/cascade-ds $extra \
            --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
            && python3 benchmarks/cascade_stages.py $RES/cascade-$pf/sweep \
                --out $RES/stages-$pf.json \
            && python3 benchmarks/server_stages.py \
                $RES/cascade-$pf/sweep/logs/model-server.log --per 32 --out $RES/server-stages-$pf.json"
    done
    step native 200 python3 benchmarks/gpu_native.py --out "$RES/native" --levels 16,32 \
        --dataset "$DATA/cascade-ds" --skip-profile
    ;;
burst)
    step cascade 170 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
        --out $RES/cascade --levels 16,32 --dataset $DATA/cascade-ds \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/cascade_stages.py $RES/cascade/sweep --out $RES/stages.json \
        && python3 benchmarks/server_stages.py $RES/cascade/sweep/logs/model-server.log \
            --per 32 --out $RES/server-stages.json"
    step tts 260 python3 benchmarks/gpu_tts.py --out "$RES/tts" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16,64 --num-prompts 64
    ;;
gc)
    for freeze in 0 1; do
        step cascade-freeze$freeze 100 bash -c "FDB_GC_FREEZE=$freeze FDB_STAGE_MARKS=1 \
            python3 benchmarks/gpu_cascade.py --out $RES/cascade-freeze$freeze --levels 16 \
            --dataset $DATA/cascade-ds \
            --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
            && python3 benchmarks/server_stages.py \
                $RES/cascade-freeze$freeze/sweep/logs/model-server.log --per 16 \
                --out $RES/server-stages-freeze$freeze.json; \
            grep -h 'garbage coll' $RES/cascade-freeze$freeze/sweep/logs/model-server.log"
    done
    ;;
vad)
    step vad-batch 60 python3 benchmarks/vad_batch.py --device cuda --streams 8,32,64 \
        --out "$RES/vad-batch.json"
    step cuda-silero 60 $GPU_PYTEST -k silero \
        tests/serving/gpu/test_gpu_cuda.py
    for vad in stage cuda; do
        extra=""
        [ "$vad" = stage ] || extra="--vad-device cuda"
        step cascade-vad-$vad 110 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
            --out $RES/cascade-vad-$vad --levels 32 --dataset $DATA/cascade-ds $extra \
            --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
            && python3 benchmarks/server_stages.py \
                $RES/cascade-vad-$vad/sweep/logs/model-server.log --per 32"
    done
    ;;
stagger)
    # name:extra arguments; one server start and one level of 32 each, stage marks on
    for run in "sync:" "s4:--stagger-s 4" "s4-pf100:--stagger-s 4 --prefetch-ms 100" \
        "s8-pf100:--stagger-s 8 --prefetch-ms 100"; do
        cascade32 "${run%%:*}" 115 FDB_STAGE_MARKS=1 "${run#*:}"
    done
    ;;
diag)
    # name:extra arguments; every thread's stack sampled (serving/stack_samples.py), CSM's first
    # frames logged, stage marks on; -si05: a 0.5 ms thread switch interval
    for run in "sync:" "s4:--stagger-s 4" "s4-vadgpu:--stagger-s 4 --vad-device cuda" \
        "s4-vadgpu-si05:--stagger-s 4 --vad-device cuda"; do
        name=${run%%:*}
        env="FDB_STAGE_MARKS=1 FDB_STACK_SAMPLES=$RES/stacks-$name.jsonl"
        [ "${name%-si05}" = "$name" ] || env="$env FDB_SWITCH_INTERVAL_MS=0.5"
        cascade32 "$name" 115 "$env" "${run#*:}"
    done
    ;;
prefill)
    # the CUDA checks of the graphs first, then the spread cohort without and with them (the
    # A/B on one machine, stacks sampled), then with them and work started at a pause (no
    # sampler: the sampler takes the GIL every 20 ms)
    step cuda-graphs 120 $GPU_PYTEST \
        -k "prefill_graphs or encoder_graphs" tests/serving/gpu/test_gpu_cuda.py
    for run in "s4:--stagger-s 4 --no-graphs" "s4-graphs:--stagger-s 4"; do
        name=${run%%:*}
        cascade32 "$name" 100 "FDB_STAGE_MARKS=1 FDB_STACK_SAMPLES=$RES/stacks-$name.jsonl" \
            "${run#*:}"
    done
    for pf in 100 50; do
        cascade32 "s4-graphs-pf$pf" 100 FDB_STAGE_MARKS=1 "--stagger-s 4 --prefetch-ms $pf"
    done
    ;;
admit)
    # CSM's and the reply model's admissions bounded to those waiting, without a wait for the
    # GPU (a device-side live mask, pinned copies): their CUDA tests, the cascade at 32 spread
    # over 4 s with prefetch_ms 50, the TTS, the cascade without prefetch, then at once
    step cuda-admit 90 $GPU_PYTEST -k "prefill_graphs" \
        tests/serving/gpu/test_gpu_cuda.py
    cascade32 s4-pf50 100 FDB_STAGE_MARKS=1 "--stagger-s 4 --prefetch-ms 50"
    step tts 120 python3 benchmarks/gpu_tts.py --out "$RES/tts" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 32
    cascade32 s4 100 FDB_STAGE_MARKS=1 "--stagger-s 4"
    cascade32 sync-pf50 100 FDB_STAGE_MARKS=1 "--prefetch-ms 50"
    ;;
priority)
    # each engine on its own CUDA stream (CSM's was the default stream), at a priority: the CUDA
    # tests of CSM's and the reply model's engines, then the cascade at 32 spread over 4 s with
    # prefetch_ms 50 at CUDA's default priority for all, with CSM the most urgent, with the
    # recognizer and the reply model the most urgent; each twice, interleaved
    step cuda-priority 90 $GPU_PYTEST -k "prefill_graphs" \
        tests/serving/gpu/test_gpu_cuda.py
    rounds 2 100 s4-pf50-base "--stagger-s 4 --prefetch-ms 50" \
        s4-pf50-tts "--stagger-s 4 --prefetch-ms 50 --stream-priority tts=-5" \
        s4-pf50-asr-llm "--stagger-s 4 --prefetch-ms 50 --stream-priority asr=-5,llm=-5"
    ;;
transcript)
    # what the dummy recognizer's transcript length costs: it decodes max_tokens_per_s (8) tokens
    # a second of speech, where a real one ends at English's 3-5. The cascade at 32 spread over
    # 4 s with prefetch_ms 50 as it is and with 4 tokens a second, twice, interleaved; then with
    # 4 and prefetch_ms 32, and at once with 4 and prefetch_ms 50. First the CUDA tests of the
    # graphs and of the engines' streams (each one no other engine or capture holds)
    step cuda-streams 120 $GPU_PYTEST \
        -k "prefill_graphs or encoder_graphs or engine_streams" tests/serving/gpu/test_gpu_cuda.py
    rounds 2 100 s4-pf50 "--stagger-s 4 --prefetch-ms 50" \
        s4-pf50-tps4 "--stagger-s 4 --prefetch-ms 50 --asr-tokens-per-s 4"
    cascade32 s4-pf32-tps4 100 FDB_STAGE_MARKS=1 "--stagger-s 4 --prefetch-ms 32 --asr-tokens-per-s 4"
    cascade32 sync-pf50-tps4 100 FDB_STAGE_MARKS=1 "--prefetch-ms 50 --asr-tokens-per-s 4"
    ;;
calibrated)
    # the recognizer's bound at 5 tokens a second (the dataset's real transcripts: see
    # docs/gpu.md's sixth session) with prefetch_ms 50 and 32 (one Silero frame), twice,
    # interleaved; then 32 at 4 tokens a second, and every session at once
    rounds 2 100 s4-pf50-tps5 "--stagger-s 4 --prefetch-ms 50 --asr-tokens-per-s 5" \
        s4-pf32-tps5 "--stagger-s 4 --prefetch-ms 32 --asr-tokens-per-s 5"
    cascade32 s4-pf32-tps4 100 FDB_STAGE_MARKS=1 "--stagger-s 4 --prefetch-ms 32 --asr-tokens-per-s 4"
    cascade32 sync-pf32-tps5 100 FDB_STAGE_MARKS=1 "--prefetch-ms 32 --asr-tokens-per-s 5"
    ;;
firstchunk)
    # the first chunk's rule: at most 7 words (the default) against 4, the recognizer's bound at
    # 5 tokens a second and prefetch_ms 50, three times, interleaved; then 4 with every session
    # at once
    rounds 3 90 s4-fc7 "--stagger-s 4 --prefetch-ms 50 --asr-tokens-per-s 5" \
        s4-fc4 "--stagger-s 4 --prefetch-ms 50 --asr-tokens-per-s 5 --first-chunk-words 4"
    cascade32 sync-fc4 90 FDB_STAGE_MARKS=1 "--prefetch-ms 50 --asr-tokens-per-s 5 --first-chunk-words 4"
    ;;
overlap)
    # the decode loops' overlap (the next step launched before the last is read) on and off, in
    # the order on off off on on off; the CUDA test of the overlapped loops first
    step cuda-tests 120 python3 -m pytest -m gpu -p no:cacheprovider \
        -k "overlap or prefill_graphs" tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-tests.log"
    alternate "$SPREAD" off --no-overlap on-1 off-1 off-2 on-2 on-3 off-3
    ;;
prompt)
    # Whisper's forced prompt (large-v3's four tokens, now the dummy model's too) in one pass
    # against a step a token (gpu_whisper.py's static and static_steps), the CUDA tests of the
    # overlapped loops and the pass, then gpu_cascade at 32 as in overlap: a first run to warm
    # the machine, then the first chunk at most 7 words (the default) and 4, in the order 7 4 4 7
    # 7 4
    step whisper 150 python3 benchmarks/gpu_whisper.py --device cuda --batches 1,4 --tokens 16 \
        --reps 5 --out "$RES/whisper.json"
    step cuda-tests 120 python3 -m pytest -m gpu -p no:cacheprovider \
        -k "overlap or encoder_graphs" tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-tests.log"
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    alternate "$SPREAD" fc4 "--first-chunk-words 4" fc7-1 fc4-1 fc4-2 fc7-2 fc7-3 fc4-3
    ;;
levels)
    # gpu_cascade at 16, 24 and 32 sessions (one server, the levels in turn), spread over 4 s,
    # 5 tokens a second, prefetch_ms 50: the most sessions that meet the first audio goal
    step cascade-levels 200 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
        --out $RES/cascade-levels --levels 16,24,32 --dataset $DATA/cascade-ds --stagger-s 4 \
        --prefetch-ms 50 --asr-tokens-per-s 5 \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}'"
    ;;
sink)
    # after a streamed reply's frames left as they came (the eighth session): gpu_cascade at 16,
    # 24 and 32 sessions as in levels, then at 32 with the first chunk at most 7 words (the
    # default) and 4, in the order 4 7 7 4
    step cascade-levels 200 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
        --out $RES/cascade-levels --levels 16,24,32 --dataset $DATA/cascade-ds --stagger-s 4 \
        --prefetch-ms 50 --asr-tokens-per-s 5 \
        --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}'"
    alternate "$SPREAD" fc4 "--first-chunk-words 4" fc4-1 fc7-1 fc7-2 fc4-2
    ;;
csmoverlap)
    # CSM's loop plain (the default) against overlapped, after the ninth session's call (where the
    # overlap made CSM's first frames later); a machine's first run is not compared
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    alternate "$SPREAD" on "--csm-overlap" off-1 on-1 on-2 off-2 off-3 on-3
    ;;
lanes)
    # the recognizer's batches on two lanes: an utterance that comes while a batch runs starts
    # at once beside it instead of waiting for its end (the tenth session); a machine's first run
    # is not compared
    step cuda-tests 60 python3 -m pytest -m gpu -p no:cacheprovider -k "lanes" \
        tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-tests.log"
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    alternate "$SPREAD" one "--asr-lanes 1" one-1 two-1 two-2 one-2 one-3 two-3
    ;;
lanescheck)
    lanes_check
    ;;
check | last)
    all_cuda_tests 240
    graph_workspace
    ;;&
final | last | decide)
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-final-1 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-final-2 90 FDB_STAGE_MARKS=1 "$SPREAD"
    step tts 140 python3 benchmarks/gpu_tts.py --out "$RES/tts" --batches 1,16 \
        --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 32
    step native-16 110 python3 benchmarks/gpu_native.py --out "$RES/native-16" --levels 16 \
        --dataset "$DATA/cascade-ds" --skip-profile
    ;;&
decide)
    # the cross-attention's two kernels that repeat themselves, timed beside each other
    # (interleaved, twice), then flash attention's passes traced in the lanes' threads
    for r in efficient-1 flash-1 flash-2 efficient-2; do
        step "step-$r" 90 python3 benchmarks/gpu_step_repeat.py --cross "${r%-*}" --replays 5 \
            --max-batch 16 --time-rows 1,4,16 --out "$RES/step-$r.json"
    done
    step trace-flash-lane 120 python3 benchmarks/gpu_whisper_trace.py --cross flash \
        --lane-thread --out "$RES/trace-flash-lane.json"
    summarize_cross
    ;;
final | last) ;;
flash)
    # the engine's cross-attention kernels (flash attention up to 4 rows, memory-efficient
    # above; the eighteenth session): the cascade at 32 (a warming run, then two), every CUDA
    # test in one process, the passes traced in the calling thread and the lanes' threads, the
    # step timed at each bucket against the memory-efficient kernel alone, a third cascade run
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-flash-1 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-flash-2 90 FDB_STAGE_MARKS=1 "$SPREAD"
    all_cuda_tests 150
    step trace-svc 120 python3 benchmarks/gpu_whisper_trace.py --out "$RES/trace-svc.json"
    step trace-svc-lane 120 python3 benchmarks/gpu_whisper_trace.py --lane-thread \
        --out "$RES/trace-svc-lane.json"
    for r in service-1 efficient-1; do
        step "step-$r" 90 python3 benchmarks/gpu_step_repeat.py --cross "${r%-*}" --replays 5 \
            --max-batch 16 --time-rows 1,2,4,8,16 --out "$RES/step-$r.json"
    done
    summarize_cross
    cascade32 s4-flash-3 90 FDB_STAGE_MARKS=1 "$SPREAD"
    ;;
crossab)
    # every CUDA test in one process (float32's decoders on the memory-efficient kernel), then
    # the cascade at 32 with the engine's kernels (flash attention up to 4 rows) against the
    # memory-efficient kernel alone (FDB_WHISPER_CROSS=efficient) in the order flash efficient
    # efficient flash, no warming run (the machine's first cascade is flash's: the penalty of a
    # first run falls on the engine's kernels)
    all_cuda_tests 150
    for r in flash-1 efficient-1 efficient-2 flash-2; do
        if [ "${r%-*}" = efficient ]; then
            cascade32 "s4-$r" 90 "FDB_STAGE_MARKS=1 FDB_WHISPER_CROSS=efficient" "$SPREAD"
        else
            cascade32 "s4-$r" 90 FDB_STAGE_MARKS=1 "$SPREAD"
        fi
    done
    ;;
check) ;;
streams)
    # the code as it is, the code before (.old/slots.py, where the streams came from torch's
    # pool, if carried), and the code as it is again
    logged_cuda_tests cuda-new-1
    if [ -f .old/slots.py ]; then
        rm -rf /tmp/old && mkdir -p /tmp/old
        tar --exclude=./.whl --exclude=./.devdata -cf - . | tar -xf - -C /tmp/old
        cp .old/slots.py /tmp/old/serving/gpu/slots.py
        step cuda-old 150 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old \
            PYTHONFAULTHANDLER=1 $GPU_PYTEST \
            -p benchmarks.stream_log -k 'not none_of_torchs_pool' $CUDA_TESTS"
        tail -1 "$RES/cuda-old.log"
    fi
    logged_cuda_tests cuda-new-2
    ;;
bisect)
    # the lanes' test where it fails (every CUDA test before it in one process), without cuBLAS
    # workspaces; then after the Whisper tests alone, alone with random bytes in the allocator's
    # free blocks, and after every test but Whisper's (last: the least telling)
    step cuda-noworkspace 150 env CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0 \
        $GPU_PYTEST $CUDA_TESTS
    step cuda-whisper 120 $GPU_PYTEST -p benchmarks.stream_log -k whisper \
        tests/serving/gpu/test_gpu_cuda.py
    # alone in a process, with random bytes in the allocator's free blocks (dirty_memory.py)
    step cuda-dirty 90 $GPU_PYTEST -p benchmarks.dirty_memory \
        -k lanes tests/serving/gpu/test_gpu_cuda.py
    step cuda-others 150 $GPU_PYTEST -p benchmarks.stream_log -k "not whisper or lanes" \
        $CUDA_TESTS
    grep -h "lanes on cuda\|\[dirty\]\|cleared" "$RES"/cuda-*.log
    ;;
bisect2)
    # the lanes' test alone in a process, then after each Whisper test before it in the file,
    # each pair in a process of its own: which test leaves what makes a lane's passes differ
    WHISPER=tests/serving/gpu/test_gpu_cuda.py
    step lanes-alone 90 $GPU_PYTEST -k lanes $WHISPER
    step lanes-after-static 120 $GPU_PYTEST -k "whisper_large_v3 and static or lanes" $WHISPER
    step lanes-after-generate 120 $GPU_PYTEST -k "whisper_large_v3 and generate or lanes" \
        $WHISPER
    step lanes-after-encoder 90 $GPU_PYTEST -k "encoder_graphs or lanes" $WHISPER
    grep -h "lanes on cuda\|passed\|failed" "$RES"/lanes-*.log
    ;;
thread)
    # whether a lane repeats itself when its passes run in its own thread (as its batches do)
    # and in the calling thread (as the lanes' CUDA test runs them), on the code as it is and on
    # the code before the streams were made here (.old/slots.py, if carried), each in a process
    # of its own
    step repeat-two 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 \
        --out "$RES/repeat-two.json"
    step repeat-two-main 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread \
        --out "$RES/repeat-two-main.json"
    step lanes-new 90 $GPU_PYTEST -k lanes tests/serving/gpu/test_gpu_cuda.py
    if [ -f .old/slots.py ]; then
        rm -rf /tmp/old && mkdir -p /tmp/old
        tar --exclude=./.whl --exclude=./.devdata -cf - . | tar -xf - -C /tmp/old
        cp .old/slots.py /tmp/old/serving/gpu/slots.py
        step repeat-two-main-old 90 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old \
            python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread \
            --out $RES/repeat-two-main-old.json"
        step lanes-old 90 bash -c "cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old $GPU_PYTEST \
            -k lanes tests/serving/gpu/test_gpu_cuda.py"
    fi
    step repeat-one-main 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 1 --main-thread \
        --out "$RES/repeat-one-main.json"
    repeat_summary
    grep -h "lanes on cuda\|passed\|failed" "$RES"/lanes-*.log
    ;;
inlane)
    # every CUDA test in one process with each lane's batches in its own thread whoever calls
    # (Batcher.in_lane), twice; between the two, what a lane does when its work runs in the
    # calling thread (gpu_whisper_repeat --main-thread) as it is, with the device synchronized
    # before each call, without the overlapped loop, without graphs; and in its own thread
    step cuda-all-1 150 $GPU_PYTEST $CUDA_TESTS
    tail -1 "$RES/cuda-all-1.log"
    for v in main:--main-thread sync:"--main-thread --sync" plain:"--main-thread --no-overlap" \
        eager:"--main-thread --eager" lane:""; do
        step "repeat-${v%%:*}" 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 ${v#*:} \
            --out "$RES/repeat-${v%%:*}.json"
    done
    step cuda-all-2 150 $GPU_PYTEST $CUDA_TESTS
    repeat_summary
    grep -h "lanes on cuda\|passed\|failed" "$RES"/cuda-all-*.log
    ;;
cache)
    # whether this torch has TORCH_CUBLAS_WORKSPACE_CACHE (workspaces from torch's allocator per
    # cuBLAS handle and stream; else cuBLAS's own default workspace), then gpu_whisper_repeat
    # with the lanes' work in the calling thread without and with it, interleaved, and every
    # CUDA test in one process with it, twice
    lib="$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/lib"
    for f in "$lib"/libtorch_cuda*.so; do
        echo "$(basename "$f"): $(grep -c TORCH_CUBLAS_WORKSPACE_CACHE "$f") match(es)"
    done | tee "$RES/cache-env.txt"
    step repeat-main-1 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread \
        --out "$RES/repeat-main-1.json"
    step repeat-cache-1 90 env TORCH_CUBLAS_WORKSPACE_CACHE=1 python3 \
        benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread --out "$RES/repeat-cache-1.json"
    step cuda-cache-1 150 env TORCH_CUBLAS_WORKSPACE_CACHE=1 $GPU_PYTEST $CUDA_TESTS
    step repeat-main-2 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread \
        --out "$RES/repeat-main-2.json"
    step repeat-cache-2 90 env TORCH_CUBLAS_WORKSPACE_CACHE=1 python3 \
        benchmarks/gpu_whisper_repeat.py --lanes 2 --main-thread --out "$RES/repeat-cache-2.json"
    step cuda-cache-2 150 env TORCH_CUBLAS_WORKSPACE_CACHE=1 $GPU_PYTEST $CUDA_TESTS
    repeat_summary
    grep -h "lanes on cuda\|passed\|failed" "$RES"/cuda-cache-*.log
    ;;
step)
    # one decoder step of Whisper replayed 200 times from the same state (gpu_step_repeat.py):
    # captured as it is, replayed in the calling thread and in the lane's; eager; captured with
    # the math attention, the memory-efficient kernel only, cuBLAS, cuBLASLt, torch's
    # deterministic algorithms; each in a process of its own: where a step's result first
    # differs from one replay to the next
    for v in graph:"" lane:--lane-thread eager:--eager math:"--sdpa math" \
        efficient:"--sdpa efficient" cublas:"--blas cublas" cublaslt:"--blas cublaslt"; do
        step "step-${v%%:*}" 90 python3 benchmarks/gpu_step_repeat.py ${v#*:} \
            --out "$RES/step-${v%%:*}.json"
    done
    step step-prompt 90 python3 benchmarks/gpu_step_repeat.py --part prompt \
        --out "$RES/step-prompt.json"
    step step-deterministic 90 env CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 \
        benchmarks/gpu_step_repeat.py --deterministic --out "$RES/step-deterministic.json"
    for f in "$RES"/step-*.json; do
        echo "$f: $(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(d['options'], d['differ'], d['first_output_differing'], d['distinct_tokens'])" "$f")"
    done
    ;;
trace)
    # every graph replay of three passes of 16 clips a lane traced (gpu_whisper_trace.py): where
    # a pass first goes another way from the lane's first pass (the record, its inputs, the first
    # value in computation order, how much), and whether any weight changed. Two lanes with the
    # calls in the calling thread (most differences in the fifteenth session): with each decoder
    # layer's intermediate results probed inside the graphs (the operation), as it is, with no
    # fused attention kernel (math), twice over; then the calls in each lane's thread, each
    # call from a zeroed self-attention cache, one lane
    for v in probes-1:--probes main-1:"" math-1:"--sdpa math" probes-2:--probes main-2:"" \
        math-2:"--sdpa math" lane:--lane-thread reset-1:--reset one:"--lanes 1"; do
        step "trace-${v%%:*}" 120 python3 benchmarks/gpu_whisper_trace.py ${v#*:} \
            --out "$RES/trace-${v%%:*}.json"
    done
    for f in "$RES"/trace-*.json; do
        echo "$f: $(python3 -c "import json, sys; d = json.load(open(sys.argv[1])); \
print(d['options'], d['transcripts_differ'], d['weights_changed'], \
[sorted({(w['kind'], w.get('output')) for p in lane for w in p.values()}) \
for lane in d['diverged'].values()])" "$f")"
    done
    ;;
cross)
    # the cross-attention's kernel chosen by the engine (memory-efficient, the seventeenth
    # session's fix): passes traced as the trace part did; every CUDA test in one process; the
    # passes with torch's own choice named (flash, cudnn), and with the engine's probed; the
    # step's time with it and with torch's choice (buckets 1, 4, 16, interleaved, twice); then
    # the lanes in their own threads
    step trace-svc-1 120 python3 benchmarks/gpu_whisper_trace.py --out "$RES/trace-svc-1.json"
    all_cuda_tests 150
    for v in flash:"--cross flash" cudnn:"--cross cudnn" svc-probes:--probes; do
        step "trace-${v%%:*}" 120 python3 benchmarks/gpu_whisper_trace.py ${v#*:} \
            --out "$RES/trace-${v%%:*}.json"
    done
    for i in 1 2; do
        for c in efficient default; do
            step "step-$c-$i" 90 python3 benchmarks/gpu_step_repeat.py --cross $c --replays 5 \
                --max-batch 16 --time-rows 1,4,16 --out "$RES/step-$c-$i.json"
        done
    done
    for v in svc-lane:--lane-thread; do
        step "trace-${v%%:*}" 120 python3 benchmarks/gpu_whisper_trace.py ${v#*:} \
            --out "$RES/trace-${v%%:*}.json"
    done
    summarize_cross
    grep -h "passed\|failed" "$RES/cuda-tests.log" | tail -3
    ;;
repeat)
    grep -n "WorkspaceMap\|thread_local" \
        "$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/include/ATen/cuda/CUDAContextLight.h" \
        >"$RES/workspace-map.txt" 2>&1
    cat "$RES/workspace-map.txt"
    all_cuda_tests 200
    # the cases that decide first (a lane without graphs, with them, two lanes), so a call cut
    # short still brings them back
    step repeat-one-eager 120 python3 benchmarks/gpu_whisper_repeat.py --lanes 1 --eager \
        --out "$RES/repeat-one-eager.json"
    step repeat-one 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 1 --out "$RES/repeat-one.json"
    step repeat-two 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --out "$RES/repeat-two.json"
    step repeat-one-encoder 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 1 \
        --no-encoder-graphs --out "$RES/repeat-one-encoder.json"
    step repeat-one-plain 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 1 --no-overlap \
        --out "$RES/repeat-one-plain.json"
    step repeat-two-f32 90 python3 benchmarks/gpu_whisper_repeat.py --lanes 2 --dtype float32 \
        --out "$RES/repeat-two-f32.json"
    step cuda-lanes 60 $GPU_PYTEST -k lanes \
        tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-lanes.log"
    ;;
sessions)
    # gpu-cascade's defaults (two recognizer lanes since the tenth session): the most sessions
    # that meet the goal, one server for the levels (48 sessions a level, in waves below 48)
    lanes_check
    cascade32 s4-warm 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-two-4 90 FDB_STAGE_MARKS=1 "$SPREAD"
    cascade32 s4-two-5 90 FDB_STAGE_MARKS=1 "$SPREAD"
    step cascade-levels 330 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
        --out $RES/cascade-levels --levels 16,24,32,40,48 --dataset $DATA/cascade-ds \
        $SPREAD --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/server_stages.py $RES/cascade-levels/sweep/logs/model-server.log \
            --per 48 --out $RES/server-stages-levels.json"
    ;;
*)
    echo "unknown PART $PART: codec-native, tts-cascade, followup, tts, asr, engines, verify, stream, window, burst, gc, vad, stagger, diag, prefill, admit, priority, transcript, calibrated, firstchunk, overlap, prompt, levels, sink, csmoverlap, lanes, sessions, lanescheck, check, final, last, decide, flash, crossab, repeat, streams, bisect, bisect2, thread, inlane, cache, step, trace or cross"
    exit 2
    ;;
esac
pack
cat "$OUT/steps.txt"
