#!/bin/sh
# Decode weight-streaming bandwidth of a 1B-class model next to the machine's memory bandwidth
# (issue 7: "state the achieved weight-streaming bandwidth next to the machine's measured
# memory bandwidth").
#
#   benches/bandwidth.sh [--model M.gguf] [--dir DIR] [--donor DONOR.gguf] [--threads 2]
#                        [--tokens 32] [--runs 3] [--ramforge BIN]
#
# 1. Without --model, makes (once, kept in DIR, default target/bench-models/) the synthetic 1B
#    llama `synth-1b-q4_0.gguf`: 22 layers, 2048 wide, 5632 FFN, 32/4 heads, Q4_0, tokenizer
#    from DONOR (default SmolLM2-135M-Instruct.Q4_1.gguf) - the same file benches/out_of_core.sh
#    makes.
# 2. Memory read bandwidth: `membw` (benches/src/bin/membw.rs) with the same thread count,
#    512 MiB, best of 5 passes.
# 3. RAMforge decode tok/s, everything resident (no --ram): the median of RUNS
#    `ramforge-tools --quiet bench --json -p 8 -n TOKENS -t THREADS`.
# 4. Weight bytes read per decoded token: every layer's matrices + the output projection + one
#    embedding row (`ramforge-tools plan --json`). Streaming bandwidth = that x tok/s.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
MODELS="${RAMFORGE_MODELS:-$ROOT/models}"
DONOR="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
DIR="$ROOT/target/bench-models"
MODEL=""
THREADS=2
TOKENS=32
RUNS=3
BIN=""
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        --donor) DONOR="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --ramforge) BIN="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; exit 2 ;;
    esac
done
(cd "$ROOT" && cargo build --release -q -p ramforge-benches --bin membw)
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --release -q -p ramforge-tools)
    BIN="$TARGET/release/ramforge-tools"
fi
if [ -z "$MODEL" ]; then
    MODEL="$DIR/synth-1b-q4_0.gguf"
    if [ ! -f "$MODEL" ]; then
        [ -f "$DONOR" ] || { echo "error: no donor model at $DONOR (run scripts/test.sh or pass --donor)" >&2; exit 1; }
        mkdir -p "$DIR"
        echo "making $MODEL" >&2
        "$BIN" --quiet synth -o "$MODEL.tmp" --arch llama --layers 22 --embd 2048 --ffn 5632 \
            --heads 32 --kv-heads 4 --type Q4_0 --vocab-from "$DONOR" --seed 1
        mv "$MODEL.tmp" "$MODEL"
    fi
fi

MEMBW=$("$TARGET/release/membw" 512 "$THREADS" 5 --json)
PLAN=$("$BIN" --quiet plan --json --ram 1T "$MODEL")
DECODE=""
i=0
timeout 600 "$BIN" --quiet bench --json --model "$MODEL" -p 8 -n 4 -t "$THREADS" >/dev/null # warm-up
while [ "$i" -lt "$RUNS" ]; do
    DECODE="$DECODE $(timeout 600 "$BIN" --quiet bench --json --model "$MODEL" -p 8 -n "$TOKENS" -t "$THREADS" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tokens_per_sec"])')"
    i=$((i + 1))
done

python3 - "$MODEL" "$THREADS" "$MEMBW" "$PLAN" "$DECODE" <<'PY'
import json, statistics, sys
model, threads, membw, plan, decode = sys.argv[1:6]
membw, plan = json.loads(membw), json.loads(plan)
runs = [float(v) for v in decode.split()]
tps = statistics.median(runs)
per_token = plan["weight_bytes_per_token"]
stream = per_token * tps / 1e9
machine = membw["read_gb_per_sec"]
print(f"model {model}, {threads} threads")
print(f"  memory read bandwidth   {machine:.2f} GB/s (membw, {threads} threads)")
print(f"  decode                  {tps:.2f} tok/s (median of {' '.join(f'{v:.2f}' for v in runs)})")
print(f"  weight bytes per token  {per_token / 2**20:.1f} MiB ({per_token} bytes)")
print(f"  weight streaming        {stream:.2f} GB/s = {100 * stream / machine:.0f}% of the measured memory bandwidth")
print(f"  bandwidth-bound limit   {machine * 1e9 / per_token:.2f} tok/s")
PY
