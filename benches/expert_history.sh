#!/usr/bin/env bash
# Expert history (issue 34): makes a ~1 GB synthetic qwen3moe with skewed routing (16 layers, width 1024,
# 64 experts of width 512, 8 used, Q4_0, `--router-skew 1.5`; kept in --dir and reused) and runs
# benches/expert_history.py on it: after one priming run, cold restarted runs with the expert history and
# without it (--no-expert-history), alternating, under ../shared/bench/limits.sh (memory 30% of the file,
# reads capped at 400 MB/s): decode tok/s of the first 32 decoding passes and their expert hit rate.
#
# usage: benches/expert_history.sh [--dir DIR] [--runs N] [--skew S] [--json]
# Needs root (cgroups, for limits.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${RAMFORGE_BENCH_DIR:-${CARGO_TARGET_DIR:-$root/target}/bench-models}" runs=3 skew=1.5 json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --skew) skew="$2"; shift 2 ;;
    --json) json=(--json); shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
(cd "$root" && cargo build --release -q -p ramforge-tools)
bin="${CARGO_TARGET_DIR:-$root/target}/release/ramforge-tools"
donor="${RAMFORGE_MODELS:-$root/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$dir"
model="$dir/synth-qwen3moe-1g-q4_0-skew$skew.gguf"
if [ ! -s "$model" ]; then
  "$bin" synth -q -o "$model.tmp" --arch qwen3moe --layers 16 --embd 1024 --ffn 512 --heads 16 --kv-heads 4 \
    --experts 64 --experts-used 8 --type Q4_0 --router-skew "$skew" --vocab-from "$donor" --seed 1
  mv "$model.tmp" "$model"
fi
python3 "$root/benches/expert_history.py" "$model" --runs "$runs" --ramforge "$bin" "${json[@]}"
