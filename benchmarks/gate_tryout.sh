#!/usr/bin/env bash
# The gate tried as a new user would, against the bundled server (about 7 minutes on 2 cores;
# run nothing else meanwhile: a loaded machine slows one side and that is a real change):
#   bash benchmarks/gate_tryout.sh [WORK_DIR]
# 1. tts-bench twice with the same configuration, and once against a server slowed by
#    --reply_delay_ms 300; freeze the first; gate the second (expect exit 0), the slow one
#    (expect exit 1, naming the TTFA guards) and, reversed, the normal one over the slow one
#    (a faster candidate: the reward shows the ratio with its interval).
# 2. The same with three small `generate --all-stages` runs (12 v1.0 turn-taking samples), the slow one
#    against a server started with --reply_delay_ms 700.
# Every exit code and GATE.md headline is printed.
set -uo pipefail
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
export FDB_WORK=$WORK/fdb
PY=${PY:-.venv/bin/python}
PORT=${SLOW_PORT:-8121}
cd "$(dirname "$0")/.."
B=$WORK/bench
TTS="--concurrency 1,2 --rounds 3 --num-prompts 4"
SEL="--v15-per-subset 0 --v10-per-subset 0 --v10-subset-count candor_turn_taking=12 --num-shards 4"

slow_server() {  # delay_ms
  $PY -m fdb serve --port "$PORT" --reply_delay_ms "$1" --max_sessions 4 > "$WORK/slow-server-$1.log" 2>&1 &
  SLOW=$!
  for _ in $(seq 1 180); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && return 0; sleep 1; done
  echo "the slow server did not start: $WORK/slow-server-$1.log" >&2; exit 2
}

show() {  # name baseline candidate
  $PY -m fdb gate --baseline "$2" --candidate "$3" --out "$WORK/gate-$1" --junit "$WORK/gate-$1/junit.xml" \
    > "$WORK/gate-$1.log" 2>&1
  echo "gate $1: exit $?: $(sed -n 3p "$WORK/gate-$1/GATE.md" 2>/dev/null || tail -1 "$WORK/gate-$1.log")"
}

# 12 turn-taking samples (the default synthetic set has 3: too few for any paired test to decide)
$PY -m fdb dataset synth --count candor_turn_taking=12 > "$WORK/synth.log" 2>&1
$PY -m fdb tts-bench --output "$B/base" $TTS > "$WORK/tts-base.log" 2>&1
$PY -m fdb tts-bench --output "$B/same" $TTS > "$WORK/tts-same.log" 2>&1
slow_server 300
$PY -m fdb tts-bench --output "$B/slow" --url "http://127.0.0.1:$PORT" --extra-body '{"ignore_ref_audio": true}' \
  $TTS > "$WORK/tts-slow.log" 2>&1
kill "$SLOW"; wait "$SLOW" 2> /dev/null
$PY -m fdb baseline freeze "$B/base" --out "$WORK/tts-baseline.json"
show tts-same "$WORK/tts-baseline.json" "$B/same"
show tts-slow "$WORK/tts-baseline.json" "$B/slow"
show tts-faster "$B/slow" "$B/same"

$PY -m fdb generate --run-name base $SEL --all-stages > "$WORK/run-base.log" 2>&1
$PY -m fdb generate --run-name same $SEL --all-stages > "$WORK/run-same.log" 2>&1
slow_server 700
$PY -m fdb generate --run-name slow $SEL --url "ws://127.0.0.1:$PORT/v1/realtime" --all-stages \
  > "$WORK/run-slow.log" 2>&1
kill "$SLOW"; wait "$SLOW" 2> /dev/null
$PY -m fdb baseline freeze base --out "$WORK/run-baseline.json"
show run-same "$WORK/run-baseline.json" same
show run-slow "$WORK/run-baseline.json" slow
echo "outputs under $WORK"
