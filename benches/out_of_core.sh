#!/usr/bin/env bash
# Out-of-core benchmark (issue 8): RAMforge vs llama.cpp decoding a model larger than its memory limit.
#
#   1. makes synthetic Q4_0 models with `ramforge-tools synth` (kept in --dir and reused):
#        1b:    22 layers, 2048 wide, 5632 FFN, 32/4 heads  (~630 MB), cgroup limit 50% of the file
#        7b:    32 layers, 4096 wide, 11008 FFN, 32/32 heads (~3.8 GB), cgroup limit 25% of the file
#        small: 6 layers, 1024 wide, 2816 FFN, 16/4 heads (~92 MB; a smoke test of the pipeline), limit 50%
#   2-4. for each: storage bandwidth, page-cache eviction, decode under a memory cgroup limit for
#        RAMforge (--ram just under the limit) and llama.cpp (defaults; pure mmap), and the table
#        (benches/out_of_core.py does these steps; see its --help).
#
# usage: benches/out_of_core.sh [--sizes 1b,7b] [--quick] [--dir DIR] [--threads N] [--tokens N]
#                               [--limit-frac F] [--donor MODEL.gguf] [--python PY] [--ramforge BIN] [--json]
#   --limit-frac F  cgroup limit as a fraction of the file for every size (default: per size, above)
#   --quick   fewer decoded tokens (4) and no llama.cpp default (repacking) run
#   --json    one JSON object per model on stdout instead of the tables
# Needs root (or a delegated cgroup) for the memory limit; without one it says so and runs unlimited.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

sizes="1b,7b" quick=0 dir="${RAMFORGE_BENCH_DIR:-${CARGO_TARGET_DIR:-$root/target}/bench-models}" frac_all="" threads=2 tokens=16
donor="${RAMFORGE_MODELS:-$root/models}/SmolLM2-135M-Instruct.Q4_1.gguf" py="" bin="" json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --dir) dir="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --limit-frac) frac_all="$2"; shift 2 ;;
    --donor) donor="$2"; shift 2 ;;
    --python) py="$2"; shift 2 ;;
    --ramforge) bin="$2"; shift 2 ;;
    --json) json=(--json); shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release -q -p ramforge-tools)
  bin="${CARGO_TARGET_DIR:-$root/target}/release/ramforge-tools"
fi
if [ -z "$py" ]; then
  if [ -n "${RAMFORGE_REFERENCE_PY:-}" ] && [ -x "$RAMFORGE_REFERENCE_PY" ]; then
    py="$RAMFORGE_REFERENCE_PY"
  else
    py="$(bash "$root/../shared/reference/setup.sh" "$root/.venv-reference" | tail -1)"
  fi
fi
[ -f "$donor" ] || { echo "error: donor model $donor not found (scripts/test.sh fetches it; or --donor)" >&2; exit 1; }
mkdir -p "$dir"

extra=()
if [ "$quick" = 1 ]; then tokens=4; extra=(--skip-llama-default); fi

for size in ${sizes//,/ }; do
  case "$size" in
    1b)    shape=(--layers 22 --embd 2048 --ffn 5632 --heads 32 --kv-heads 4);  frac=0.5 ;;
    7b)    shape=(--layers 32 --embd 4096 --ffn 11008 --heads 32 --kv-heads 32); frac=0.25 ;;
    small) shape=(--layers 6 --embd 1024 --ffn 2816 --heads 16 --kv-heads 4);   frac=0.5 ;;
    *) echo "error: unknown size $size (1b, 7b, small)" >&2; exit 2 ;;
  esac
  frac="${frac_all:-$frac}"
  model="$dir/synth-$size-q4_0.gguf"
  if [ ! -s "$model" ]; then
    echo "step 1: synth $size -> $model" >&2
    "$bin" synth -o "$model.tmp" --arch llama "${shape[@]}" --type Q4_0 --vocab-from "$donor" --seed 1
    mv "$model.tmp" "$model"
  fi
  python3 "$root/benches/out_of_core.py" "$model" --limit-frac "$frac" --threads "$threads" \
    --gen-tokens "$tokens" --ramforge "$bin" --python "$py" "${extra[@]}" "${json[@]}"
done
