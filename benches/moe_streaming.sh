#!/usr/bin/env bash
# MoE beyond RAM (issue 16): makes the ~1 GB synthetic qwen3moe (16 layers, width 1024, 64 experts
# of width 512, 8 used, Q4_0; kept in --dir and reused) and runs benches/moe_streaming.py on it:
# RAMforge's expert streaming against llama.cpp's pure mmap under ../shared/bench/limits.sh
# (memory 30% of the file, reads capped at 400 MB/s), a sweep of memory 10%-100%, and the warm case.
#
# usage: benches/moe_streaming.sh [--dir DIR] [--runs N] [--tokens N] [--quick] [--json]
#   --quick  one run, 8 tokens, no sweep and no warm case
# Needs root (cgroups, for limits.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${RAMFORGE_BENCH_DIR:-${CARGO_TARGET_DIR:-$root/target}/bench-models}" runs=3 tokens=16 extra=(--sweep --warm) json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --quick) runs=1; tokens=8; extra=(); shift ;;
    --json) json=(--json); shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
(cd "$root" && cargo build --release -q -p ramforge-tools)
bin="${CARGO_TARGET_DIR:-$root/target}/release/ramforge-tools"
py="${RAMFORGE_REFERENCE_PY:-}"
[ -n "$py" ] && [ -x "$py" ] || py="$(bash "$root/../shared/reference/setup.sh" "$root/models/.venv-reference" | tail -1)"
donor="${RAMFORGE_MODELS:-$root/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$dir"
model="$dir/synth-qwen3moe-1g-q4_0.gguf"
if [ ! -s "$model" ]; then
  "$bin" synth -q -o "$model.tmp" --arch qwen3moe --layers 16 --embd 1024 --ffn 512 --heads 16 --kv-heads 4 \
    --experts 64 --experts-used 8 --type Q4_0 --vocab-from "$donor" --seed 1
  mv "$model.tmp" "$model"
fi
python3 "$root/benches/moe_streaming.py" "$model" --runs "$runs" -n "$tokens" --ramforge "$bin" --python "$py" \
  "${extra[@]}" "${json[@]}"
