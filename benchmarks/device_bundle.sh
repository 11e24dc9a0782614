#!/usr/bin/env bash
# What a GPU machine without network needs to run benchmarks/gpu_suite.sh, made here.
#
#   benchmarks/device_bundle.sh [WHEELS] [DATASETS]      (defaults .whl and .devdata)
#
# WHEELS gets the wheels of the packages fdb's serving path needs that the GPU machine lacks
# (docs/gpu.md lists them), each at the version this checkout's .venv has, built for CPython 3.12
# on manylinux x86_64 (the GPU machine's Python), without their dependencies (the list is
# closed). DATASETS gets the synthetic datasets gpu_suite.sh reads: synth-tts (fdb's synthetic
# tree, whose seedtts/ is the Seed-TTS list gpu_tts reads) and cascade-ds (48 candor_turn_taking
# samples, benchmarks/cascade_capacity.synthetic_tree). Run `make venv` first. Both folders are
# ignored by git; the device call carries them (carry [".whl", ".devdata"], 64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.whl}
DATA=${2:-.devdata}
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "no $PY: run make venv first" >&2; exit 1; }
PACKAGES="fastapi starlette pydantic pydantic-core annotated-types typing-inspection uvicorn
websockets soundfile cffi pycparser soxr picows aiofastnet python-socks multidict jiwer rapidfuzz
whisper-normalizer indic-numtowords text2num more-itertools openai httpx2 httpcore2 truststore jiter
annotated-doc opentelemetry-api silero-vad"
mkdir -p "$WHEELS"
for name in $PACKAGES; do
    version=$("$PY" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "$name" \
        2>/dev/null) || { echo "$name is not installed in $PY's environment: skipped" >&2; continue; }
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 --abi abi3 --abi none \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any \
        -d "$WHEELS" "$name==$version"
done
"$PY" - "$DATA" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
from cascade_capacity import synthetic_tree
from fdb.datasets.synthetic import generate_synthetic, synthetic_complete

data = Path(sys.argv[1])
if not synthetic_complete(data / "synth-tts"):
    generate_synthetic(data / "synth-tts")
synthetic_tree(data / "cascade-ds", 48)
EOF
du -sh "$WHEELS" "$DATA"
