#!/usr/bin/env bash
# Speculative decoding benchmark (issue 34): plain decoding vs --lookup vs --draft on Qwen2.5-Coder
# 1.5B streamed from a throttled disk, the tokens per pass and bytes read per generated token beside
# the tok/s. Every run: ../shared/bench/limits.sh at --mem-frac of the 1.5B file, reads capped at
# --read-bps, the file evicted first (cold), the same --ram for every run (the cgroup limit less
# 48 MiB for the tokenizer, allocator and stacks); medians of --reps runs, the modes alternating.
#
#   lookup: a code-editing prompt whose answer repeats most of its input (rename a variable
#           in a function): --lookup, against plain decoding of the same prompt (target >= 2x);
#   draft:  a code-writing prompt: --draft with the 0.5B file (inside the same --ram), against
#           plain decoding of the same prompt (target >= 1.3x).
#
# usage: benches/speculative.sh [--models DIR] [--reps N] [--tokens N] [--threads N]
#                               [--mem-frac F] [--read-bps N] [--ramforge BIN] [--only lookup|draft]
# Prints one JSON object per run (mode, prompt, tok/s, speculation) and a table of medians.
# Needs root (cgroups); run it on an otherwise idle machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
only="" models="${RAMFORGE_MODELS:-$root/models}" reps=3 tokens=128 threads=2 frac=0.5 bps=400000000 bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --mem-frac) frac="$2"; shift 2 ;;
    --read-bps) bps="$2"; shift 2 ;;
    --ramforge) bin="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release -q -p ramforge-tools)
  bin="${CARGO_TARGET_DIR:-$root/target}/release/ramforge-tools"
fi
target="$models/qwen25-coder-1.5b.gguf" draft="$models/qwen25-coder-0.5b.gguf"
for f in "$target" "$draft"; do
  [ -f "$f" ] || { echo "error: $f not found (../shared/reference/fetch_models.sh DIR --qwen-pair)" >&2; exit 1; }
done
limits="$root/../shared/bench/limits.sh"
size=$(stat -c %s "$target")
mem=$(python3 -c "print(int($size * $frac))")
ram=$((mem - 48 * 1024 * 1024))

edit_prompt='Rename the variable `total` to `acc` in this function and show the whole function.

```python
def summarize(orders):
    total = 0
    for order in orders:
        if order.status == "paid":
            total += order.amount
        elif order.status == "refunded":
            total -= order.amount
    print("orders:", len(orders), "total:", total)
    return total
```'
write_prompt='Write a Python function that parses an ISO 8601 date string and returns a datetime, with a docstring and error handling.'

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
run() { # mode prompt extra-args...
  local mode="$1" prompt="$2"; shift 2
  sudo_or=""; [ "$(id -u)" = 0 ] || sudo_or="sudo"
  # limits.sh drops the target from the page cache; the draft model must start cold too.
  python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$draft"
  $sudo_or bash "$limits" --mem "$mem" --read-bps "$bps" --file "$target" -- \
    "$bin" run "$target" --chat --prompt "$prompt" -n "$tokens" -t "$threads" --ram "$ram" --json "$@" \
    | python3 -c 'import json,sys; j=json.load(sys.stdin); s=j.get("speculation") or {}; print(json.dumps({"mode":sys.argv[1],"tok_s":j["decode_tokens_per_sec"],"tokens":j["generated_tokens"],"bytes_per_generated_token":j["bytes_read_per_generated_token"],"tokens_per_pass":s.get("tokens_per_pass",1.0),"acceptance":s.get("acceptance"),"draft_budget":s.get("draft_budget_bytes")}))' "$mode" \
    | tee -a "$out/runs.jsonl"
}
for _ in $(seq "$reps"); do
  if [ "$only" != draft ]; then
    run lookup-plain "$edit_prompt"
    run lookup "$edit_prompt" --lookup
  fi
  if [ "$only" != lookup ]; then
    run draft-plain "$write_prompt"
    run draft "$write_prompt" --draft "$draft"
  fi
done
python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda mode, key: statistics.median(r[key] for r in runs if r["mode"] == mode)
print("| mode | tok/s | tokens/pass | bytes/generated token | acceptance | vs plain |")
print("|---|---:|---:|---:|---:|---:|")
for mode, base in [("lookup-plain", None), ("lookup", "lookup-plain"), ("draft-plain", None), ("draft", "draft-plain")]:
    if not any(r["mode"] == mode for r in runs):
        continue
    acc = [r["acceptance"] for r in runs if r["mode"] == mode and r["acceptance"] is not None]
    ratio = f"{med(mode, 'tok_s') / med(base, 'tok_s'):.2f}x" if base else "-"
    print(f"| {mode} | {med(mode, 'tok_s'):.2f} | {med(mode, 'tokens_per_pass'):.2f} | "
          f"{med(mode, 'bytes_per_generated_token') / 2**20:.1f} MiB | "
          f"{(f'{statistics.median(acc):.0%}' if acc else '-')} | {ratio} |")
PY
