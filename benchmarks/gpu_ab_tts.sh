#!/usr/bin/env bash
# A TTS A/B on one GPU machine: the CSM of an older tree against the working tree's, C1 and C16,
# 32 requests a level, old then new (docs/gpu.md's A/B of CSM's admission).
#
#   git archive OLD fdb serving recorders scorers runs reports judges benchmarks pyproject.toml |
#       tar -x -C .devdata/old                      # the old tree, carried with the datasets
#   bash benchmarks/gpu_ab_tts.sh OUT
set -u
OUT=${1:?usage: gpu_ab_tts.sh OUT}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
DATA=$PWD/.devdata
for side in old new; do
    if [ "$side" = new ]; then dir=$PWD; else dir=$DATA/old; fi
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout -k 10 100 python3 benchmarks/gpu_tts.py \
        --out "$OUT/$side" --skip-profile --seed-tts "$DATA/synth-tts/seedtts" \
        --concurrency 1,16 --num-prompts 32 > "$OUT/$side.log" 2>&1; echo "$side rc=$?")
    pkill -f "fdb serve" 2>/dev/null
    sed -n '/## Serving/,/Details/p' "$OUT/$side/tts-bench/TTS.md" 2>/dev/null | grep "^| 1\|^| 16"
done
