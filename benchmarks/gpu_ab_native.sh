#!/usr/bin/env bash
# A native A/B on one GPU machine: gpu_native of an older tree against the working tree's, at
# LEVELS (default 32), interleaved old, new, old, new (docs/gpu.md's A/B of the native session
# on the graph runtime).
#
#   git archive OLD fdb serving recorders scorers runs reports judges benchmarks pyproject.toml |
#       tar -x -C .devdata/old                      # the old tree, carried with the datasets
#   bash benchmarks/gpu_ab_native.sh OUT [LEVELS]
set -u
OUT=${1:?usage: gpu_ab_native.sh OUT [LEVELS]}
LEVELS=${2:-32}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
DATA=$PWD/.devdata
mkdir -p "$OUT"
for run in 1 2; do
    for side in old new; do
        if [ "$side" = new ]; then dir=$PWD; else dir=$DATA/old; fi
        (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout -k 10 150 python3 benchmarks/gpu_native.py \
            --out "$OUT/$side-$run" --levels "$LEVELS" --dataset "$DATA/cascade-ds" \
            --skip-profile >"$OUT/$side-$run.log" 2>&1
        echo "$side run $run rc=$?")
        pkill -f "fdb serve" 2>/dev/null
        grep "sessions: failed" "$OUT/$side-$run.log" | sed "s/^/$side $run: /"
    done
done
