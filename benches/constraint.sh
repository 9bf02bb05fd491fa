#!/usr/bin/env bash
# What a grammar's token mask costs (issue 35): decoding Qwen2.5-Coder 0.5B free, and the same
# prompt under a JSON schema (`run --json-schema`), alternating; both all-resident, the same
# token count (the free run with --ignore-eos, the schema's array too long to end sooner).
# Reports medians of --reps runs: decode tok/s of each, their ratio, and the mask's share of the
# constrained decode (`constraint_secs` / `decode_secs` of `run --json`: computing the mask,
# applying it to the logits and advancing the grammar; target < 10%), with its time per token.
#
# usage: benches/constraint.sh [--models DIR] [--reps N] [--tokens N] [--threads N] [--ramforge BIN]
# Prints one JSON object per run and a table of medians. Run it on an otherwise idle machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="${RAMFORGE_MODELS:-$root/models}" reps=5 tokens=128 threads=2 bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --ramforge) bin="$2"; shift 2 ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,""); print; next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release -q -p ramforge-tools)
  bin="${CARGO_TARGET_DIR:-$root/target}/release/ramforge-tools"
fi
model="$models/qwen25-coder-0.5b.gguf"
[ -f "$model" ] || { echo "error: $model not found (../shared/reference/fetch_models.sh DIR --qwen-pair)" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# An inventory of at least 40 items: more than --tokens tokens of JSON, so the grammar never
# completes first and both runs decode the same number of tokens.
cat >"$out/schema.json" <<'JSON'
{"type": "object", "properties": {"items": {"type": "array", "minItems": 40, "items": {"type": "object",
 "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 0},
  "color": {"enum": ["red", "green", "blue", "yellow", "other"]}},
 "required": ["name", "count", "color"], "additionalProperties": false}}},
 "required": ["items"], "additionalProperties": false}
JSON
prompt='List the fruit in a large grocery store as JSON: every fruit with its name, how many there are and its color.'

run() { # mode extra-args...
  local mode="$1"; shift
  "$bin" run "$model" --chat --prompt "$prompt" -n "$tokens" -t "$threads" --json "$@" \
    | python3 -c 'import json,sys; j=json.load(sys.stdin); print(json.dumps({"mode":sys.argv[1],"tokens":j["generated_tokens"],"tok_s":j["decode_tokens_per_sec"],"decode_secs":j["decode_secs"],"constraint_secs":j["constraint_secs"]}))' "$mode" \
    | tee -a "$out/runs.jsonl"
}
for _ in $(seq "$reps"); do
  run free --ignore-eos
  run schema --json-schema "$out/schema.json"
done
python3 - "$out/runs.jsonl" "$tokens" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
want = int(sys.argv[2])
short = [r for r in runs if r["tokens"] != want]
if short:
    sys.exit(f"error: {len(short)} runs decoded other than {want} tokens: {short}")
med = lambda mode, f: statistics.median(f(r) for r in runs if r["mode"] == mode)
free, schema = med("free", lambda r: r["tok_s"]), med("schema", lambda r: r["tok_s"])
share = med("schema", lambda r: r["constraint_secs"] / r["decode_secs"])
per_token = med("schema", lambda r: r["constraint_secs"] / r["tokens"])
print(f"\n| decode tok/s free | under the schema | ratio | mask share of decode | mask per token |")
print(f"|---:|---:|---:|---:|---:|")
print(f"| {free:.1f} | {schema:.1f} | {schema / free:.2f} | {100 * share:.1f}% | {1000 * per_token:.2f} ms |")
PY
