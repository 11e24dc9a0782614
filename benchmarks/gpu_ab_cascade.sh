#!/usr/bin/env bash
# A cascade A/B on one GPU machine: the serving code of older trees against the working tree's,
# gpu_cascade at 32 sessions spread over 4 s with prefetch_ms 50 and a 200 ms server_vad silence
# (stage marks on), ROUNDS rounds with the sides interleaved (an even round in the reverse
# order), then gpu_tts at C1 and C16 (32 requests a level) for each side when TTS is 1
# (docs/gpu.md's fifth session).
#
#   mkdir -p .devdata/trees/NAME && git archive REV fdb serving recorders scorers runs reports \
#       judges benchmarks pyproject.toml | tar -x -C .devdata/trees/NAME     (a side, each)
#   bash benchmarks/gpu_ab_cascade.sh OUT [ROUNDS] [TTS] [ARGS]  (the trees carried with .devdata)
#
# ARGS: more gpu_cascade.py arguments for every run, e.g. "--asr-tokens-per-s 5". WARM=1 runs
# the working tree once first, a warming run that is not compared; CUDA_TESTS=0 skips the CUDA
# tests that run first.
# Every side runs with the same wheels (.whl) and datasets (.devdata); OUT/results.tgz holds
# every summary, log and stage table, rewritten after each run.
set -u
OUT=${1:?usage: gpu_ab_cascade.sh OUT [ROUNDS] [TTS] [ARGS]}
ROUNDS=${2:-2}
TTS=${3:-1}
ARGS=${4:-}
DATA=$PWD/.devdata
RES=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    .whl/*.whl \
    >"$RES/pip.log" 2>&1 || { echo "wheel install failed"; tail -5 "$RES/pip.log"; exit 1; }
nvidia-smi >"$RES/nvidia-smi.txt" 2>&1
sides="$(ls "$DATA/trees" 2>/dev/null) new"
for side in $sides; do  # the sources each side ran
    dir=$DATA/trees/$side
    [ "$side" = new ] && dir=$PWD
    echo "$(python3 benchmarks/sources_sha.py --root "$dir" --list "$RES/sources-$side.txt" \
        fdb serving benchmarks)  $side sources sha256" >>"$RES/versions.txt"
done

pack() {
    tar -czf "$OUT/results.tgz.part" --exclude="*.wav" --exclude="*.pcm" --exclude="*.png" \
        --exclude="trace.jsonl" -C "$RES" . && mv "$OUT/results.tgz.part" "$OUT/results.tgz"
}

run() {  # run SIDE NAME LIMIT COMMAND...: in the side's tree, its sources on the path (after
    # the wheels, which hold no fdb code)
    local side=$1 name=$2 limit=$3 dir=$DATA/trees/$1 started rc
    shift 3
    [ "$side" = new ] && dir=$PWD
    started=$(date +%s)
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout -k 15 "$limit" "$@") >"$RES/$name.log" 2>&1
    rc=$?
    pkill -f "fdb serve" 2>/dev/null
    echo "$name rc=$rc $(($(date +%s) - started))s" | tee -a "$OUT/steps.txt"
    pack
}

# the working tree's CUDA tests of CSM's and the reply model's engines first (their prefill
# graphs, CSM's overlapped loop; CUDA_TESTS=0: not, when the device time left is short)
if [ "${CUDA_TESTS:-1}" = 1 ]; then
    run new cuda-tests 120 python3 -m pytest -m gpu -p no:cacheprovider \
        -k "prefill_graphs or csm_overlap" tests/serving/gpu/test_gpu_cuda.py
    tail -1 "$RES/cuda-tests.log"
fi

cascade() {  # cascade SIDE NAME: one run of 32 sessions, then its server's stage table
    local name=$2
    run "$1" "$name" 100 bash -c "FDB_STAGE_MARKS=1 python3 benchmarks/gpu_cascade.py \
        --out $RES/$name --levels 32 --dataset $DATA/cascade-ds --stagger-s 4 \
        --prefetch-ms 50 $ARGS --turn-detection '{\"type\":\"server_vad\",\"silence_duration_ms\":200}' \
        && python3 benchmarks/server_stages.py $RES/$name/sweep/logs/model-server.log \
            --per 32 --out $RES/server-stages-$name.json"
    grep -E "first audio|pcm_f32le" "$RES/$name.log" | tail -2
}

# WARM=1: a first run of the working tree, not compared (a machine just started has given
# one outlier run: docs/gpu.md, seventh session)
[ "${WARM:-0}" = 1 ] && cascade new cascade-warm
for round in $(seq 1 "$ROUNDS"); do
    order=$sides  # an even round runs the sides in the reverse order (no side always first)
    [ $((round % 2)) = 0 ] && order=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
    for side in $order; do
        cascade "$side" "cascade-$side-$round"
    done
done
if [ "$TTS" = 1 ]; then
    for side in $sides; do
        run "$side" "tts-$side" 100 python3 benchmarks/gpu_tts.py --out "$RES/tts-$side" \
            --skip-profile --seed-tts "$DATA/synth-tts/seedtts" --concurrency 1,16 --num-prompts 32
        sed -n '/## Serving/,/Details/p' "$RES/tts-$side/tts-bench/TTS.md" 2>/dev/null |
            grep "^| 1 \|^| 16 "
    done
fi
cat "$OUT/steps.txt"
