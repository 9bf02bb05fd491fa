#!/bin/sh
# Decode speed with and without a background CPU hog (issue 7: "threading that holds up on a
# busy 2-core machine ... must degrade gracefully, not 10x").
#
#   benches/cpu_hog.sh [--model M.gguf] [--threads 2] [--tokens 64] [--runs 3] [--ramforge BIN]
#
# Each run is `ramforge-tools --quiet bench --json -p 8 -n TOKENS -t THREADS`, alternately
# without and with one busy-looping shell (`while :; do :; done`) started just before and
# killed (by its pid) just after. Prints the median decode tok/s of each and hog/quiet.
# A perfect scheduler would give (threads - 1/2) / threads with one of the cores shared
# (0.75 at 2 threads); spin-waiting thread pools collapse far below that.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL="${RAMFORGE_MODELS:-$ROOT/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=2
TOKENS=64
RUNS=3
BIN=""
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --ramforge) BIN="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --release -q -p ramforge-tools)
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/ramforge-tools"
fi
[ -f "$MODEL" ] || { echo "error: no model at $MODEL (run scripts/test.sh or pass --model)" >&2; exit 1; }

decode_tps() {
    timeout 600 "$BIN" --quiet bench --json --model "$MODEL" -p 8 -n "$TOKENS" -t "$THREADS" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tokens_per_sec"])'
}

HOG=""
stop_hog() { if [ -n "$HOG" ]; then kill "$HOG" 2>/dev/null || true; wait "$HOG" 2>/dev/null || true; HOG=""; fi; }
trap stop_hog EXIT INT TERM

QUIET=""
BUSY=""
i=0
decode_tps >/dev/null # warm-up: page cache, CPU frequency
while [ "$i" -lt "$RUNS" ]; do
    QUIET="$QUIET $(decode_tps)"
    sh -c 'while :; do :; done' &
    HOG=$!
    BUSY="$BUSY $(decode_tps)"
    stop_hog
    i=$((i + 1))
done

python3 - "$THREADS" "$QUIET" "$BUSY" <<'PY'
import statistics, sys
threads, quiet, busy = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
q, b = statistics.median(quiet), statistics.median(busy)
print(f"threads {threads}: decode tok/s without hog {q:.2f}, with one CPU hog {b:.2f}, ratio {b / q:.2f}")
print(f"  runs without: {' '.join(f'{v:.2f}' for v in quiet)}; with: {' '.join(f'{v:.2f}' for v in busy)}")
PY
