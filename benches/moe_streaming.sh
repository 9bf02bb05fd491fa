#!/usr/bin/env bash
# MoE beyond RAM (issue 16): makes the ~1 GB synthetic qwen3moe (16 layers, width 1024, 64 experts
# of width 512, 8 used, Q4_0; kept in --dir and reused) and runs benches/moe_streaming.py on it:
# RAMforge's expert streaming against llama.cpp's pure mmap under ../shared/bench/limits.sh
# (memory 30% of the file, reads capped at 400 MB/s), a sweep of memory 10%-100%, and the warm case.
#
# usage: benches/moe_streaming.sh [--dir DIR] [--runs N] [--tokens N] [--quick] [--scale] [--json]
#   --quick  one run, 8 tokens, no sweep and no warm case
#   --scale  issue 29's scale case instead: a ~11 GB glm4moe (24 layers, width 2048, 256 experts of
#            width 512, 8 used, head size 128, Q4_0) written as split files of at most 3 GB, in a
#            4 GiB memory cgroup; no sweep or warm case, but the checks: `plan`'s time under the
#            limits and greedy tokens identical to a run without limits
#   --deepseek4  issue 33's case instead: a ~1 GB deepseek4 (16 layers, width 1024, 64 MXFP4 experts
#            of width 512, 8 used, the first 3 layers hash-routed, compress ratios 0,0 then 4,128
#            alternating, a 128-position window; the rest Q8_0) at 30% of the file, with the checks
# Needs root (cgroups, for limits.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${RAMFORGE_BENCH_DIR:-${CARGO_TARGET_DIR:-$root/target}/bench-models}" runs=3 tokens=16 extra=(--sweep --warm) json=() scale=0 v4=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --quick) runs=1; tokens=8; extra=(); shift ;;
    --scale) scale=1; shift ;;
    --deepseek4) v4=1; shift ;;
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
if [ "$scale" = 1 ]; then
  model="$dir/synth-glm4moe-11g-q4_0-00001-of-00004.gguf"
  if [ ! -s "$dir/synth-glm4moe-11g-q4_0-00004-of-00004.gguf" ]; then
    "$bin" synth -q -o "$dir/synth-glm4moe-11g-q4_0.gguf" --arch glm4moe --layers 24 --embd 2048 --ffn 512 \
      --heads 16 --kv-heads 4 --head-dim 128 --experts 256 --experts-used 8 --type Q4_0 \
      --split-max-size 3G --vocab-from "$donor" --seed 1
  fi
  size=$(stat -c %s "$dir"/synth-glm4moe-11g-q4_0-0000?-of-00004.gguf | awk '{s += $1} END {print s}')
  frac=$(python3 -c "print(4 * 2**30 / $size)")
  exec python3 "$root/benches/moe_streaming.py" "$model" --mem-frac "$frac" --runs "$runs" -n "$tokens" \
    --ramforge "$bin" --python "$py" --checks "${json[@]}"
fi
if [ "$v4" = 1 ]; then
  model="$dir/synth-deepseek4-1g-mxfp4.gguf"
  if [ ! -s "$model" ]; then
    "$bin" synth -q -o "$model.tmp" --arch deepseek4 --layers 16 --embd 1024 --ffn 512 --heads 16 --kv-heads 1 \
      --head-dim 128 --rope-dim 32 --q-lora-rank 384 --o-groups 4 --o-lora-rank 256 --experts 64 \
      --experts-used 8 --hash-layers 3 --sliding-window 128 --indexer-heads 16 --indexer-dim 64 \
      --indexer-top-k 64 --compress-ratios 0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128 \
      --type MXFP4 --vocab-from "$donor" --seed 1
    mv "$model.tmp" "$model"
  fi
  exec python3 "$root/benches/moe_streaming.py" "$model" --runs "$runs" -n "$tokens" --ramforge "$bin" \
    --python "$py" --checks "${json[@]}"
fi
model="$dir/synth-qwen3moe-1g-q4_0.gguf"
if [ ! -s "$model" ]; then
  "$bin" synth -q -o "$model.tmp" --arch qwen3moe --layers 16 --embd 1024 --ffn 512 --heads 16 --kv-heads 4 \
    --experts 64 --experts-used 8 --type Q4_0 --vocab-from "$donor" --seed 1
  mv "$model.tmp" "$model"
fi
python3 "$root/benches/moe_streaming.py" "$model" --runs "$runs" -n "$tokens" --ramforge "$bin" --python "$py" \
  "${extra[@]}" "${json[@]}"
