#!/usr/bin/env bash
# Fuzzing of the untrusted-input paths with cargo-fuzz (libFuzzer): the GGUF reader, the
# tokenizer, chat templates, model loading, the expert history and server requests.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]   short pass (CI), 60 s per target by default,
#                                                       $RAMFORGE_FUZZ_JOBS targets at once (default 2)
#   scripts/fuzz.sh --long [TARGET ...]                 each target to $RAMFORGE_FUZZ_RUNS executions
#                                                       (default 10000000)
#
# A long run may be stopped (SIGTERM or SIGINT to the fuzzer, e.g. to free the cores for a
# benchmark) and resumed: each target's campaign total (executions, seconds, segments) is kept
# in fuzz/long/<target>, and the next --long run of it goes on from its grown corpus with the
# executions still missing. Delete that file to start a campaign afresh.
#
# RAMFORGE_FUZZ_SANITIZER picks cargo-fuzz's sanitizer (default address; none runs the same
# checks - panics, hangs, the RSS limit - several times faster, without AddressSanitizer's
# memory checks of unsafe code).
# TARGETs default to every target in fuzz/fuzz_targets. Each target's summary line gives its
# executions, libFuzzer's coverage (cov:) and the crashes it left; the script fails if any
# target crashed. Installs cargo-fuzz if it is missing. cargo-fuzz needs nightly-only rustc
# flags; on the stable toolchain RUSTC_BOOTSTRAP=1 unlocks them (verified with rustc 1.95
# stable). The gguf_parse corpus is seeded by the writer and by shrunken real headers, the
# others from fuzz/seeds/<target>/; the tokenizer target loads the real models from
# $RAMFORGE_MODELS. A crash's input is saved under fuzz/artifacts/<target>/ -- keep it as a
# regression (fuzz/README.md says where).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mode=short
secs=60
if [ "${1:-}" = "--long" ]; then
    mode=long
    shift
elif [ "$#" -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
    secs="$1"
    shift
fi
runs="${RAMFORGE_FUZZ_RUNS:-10000000}"
sanitizer="${RAMFORGE_FUZZ_SANITIZER:-address}"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
models="${RAMFORGE_MODELS:-$root/models}"
export RAMFORGE_MODELS="$models"
fuzz_target_dir="${RAMFORGE_FUZZ_TARGET_DIR:-$root/fuzz/target}"
# Builds of different sanitizers do not share a directory (each would rebuild the other's).
[ "$sanitizer" = address ] || fuzz_target_dir="$fuzz_target_dir-$sanitizer"
# cargo-fuzz builds each crate as one codegen unit (its fastest fuzzing code), which leaves one
# of CI's two cores idle through the long compiles; the short pass (CI's smoke test) takes 16,
# a faster build for fewer executions a second. RAMFORGE_FUZZ_CODEGEN_UNITS overrides either.
units="${RAMFORGE_FUZZ_CODEGEN_UNITS:-}"
if [ -z "$units" ] && [ "$mode" = short ]; then units=16; fi
build_args=(-s "$sanitizer" --target-dir "$fuzz_target_dir${units:+-cgu$units}" ${units:+--codegen-units "$units"})
export RUSTC_BOOTSTRAP=1
# chat_template renders in a forked child under an address-space limit; a failed allocation
# there must abort the child quietly, not run AddressSanitizer's report (whose libFuzzer
# callback would save the input as a crash of the parent).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --version 0.13.2 --locked
fi

echo "== seed corpus"
seeds=()
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2ish-Q8_0.gguf smollm2-IQ4_XS.gguf; do
    [ -f "$models/$m" ] && seeds+=("$models/$m")
done
cargo run -q -p ramforge-gguf --example fuzz_corpus -- fuzz/corpus/gguf_parse "${seeds[@]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== build"
if [ "$#" -eq 0 ]; then
    # Every target: one build, which compiles their binaries side by side.
    (cd fuzz && cargo fuzz build "${build_args[@]}")
else
    for t in "${targets[@]}"; do (cd fuzz && cargo fuzz build "$t" "${build_args[@]}"); done
fi

fuzz_one() { # TARGET: one target's pass; its summary line also goes to $work/TARGET.line
    local t=$1
    local state done_execs done_secs segments before log rc asan start took execs cov crashes
    local interrupted line
    local -a limit extra
    # A long campaign's state: executions, seconds and segments so far.
    state="fuzz/long/$t"
    done_execs=0 done_secs=0 segments=0
    if [ "$mode" = long ]; then
        mkdir -p fuzz/long
        [ -f "$state" ] && read -r done_execs done_secs segments < "$state"
        if [ "$done_execs" -ge "$runs" ]; then
            line="$t: campaign done, executions $done_execs in $done_secs s ($segments segments)"
            echo "== $line"
            echo "$line" > "$work/$t.line"
            return 0
        fi
        limit=(-runs="$((runs - done_execs))")
    else
        limit=(-max_total_time="$secs")
    fi
    echo "== fuzz $t (${limit[*]}, sanitizer $sanitizer)"
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    if [ -d "fuzz/seeds/$t" ]; then cp -n fuzz/seeds/"$t"/* "fuzz/corpus/$t/" || true; fi
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    log="$(mktemp)"
    rc=0
    extra=() asan="$ASAN_OPTIONS"
    # chat_template re-runs each render in-process to see its coverage, and a template can
    # leak what it builds into a reference cycle there (a namespace holding itself: seed
    # namespace_cycle); minijinja frees values by reference counting. On Linux every other
    # render runs in a forked child whose memory goes with it, so LeakSanitizer is off here.
    if [ "$t" = chat_template ]; then extra=(-detect_leaks=0); asan="$asan:detect_leaks=0"; fi
    start=$(date +%s)
    # The short pass (CI) keeps libFuzzer's progress lines out of the log unless the target
    # fails (then its last 60 lines): the summary lines below say what ran.
    (cd fuzz && ASAN_OPTIONS="$asan" cargo fuzz run "$t" "${build_args[@]}" "corpus/$t" -- \
        "${limit[@]}" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 "${extra[@]}") 2>&1 \
        | if [ "$mode" = long ]; then tee "$log"; else cat > "$log"; fi || rc=$?
    took=$(( $(date +%s) - start ))
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    crashes=$(( $(find "fuzz/artifacts/$t" -type f | wc -l) - before ))
    # SIGTERM/SIGINT makes libFuzzer print its final stats and exit 72 (cargo-fuzz then fails).
    interrupted=0
    if [ "$rc" -ne 0 ] && grep -q 'libFuzzer: run interrupted' "$log" && [ "$crashes" -eq 0 ]; then
        interrupted=1 rc=0
    fi
    if [ "$mode" = short ] && { [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; }; then tail -60 "$log"; fi
    rm -f "$log"
    line="$t: executions $execs in ${took} s, cov $cov, crashes $crashes, exit $rc (sanitizer $sanitizer)"
    if [ "$mode" = long ] && [[ "$execs" =~ ^[0-9]+$ ]]; then
        done_execs=$((done_execs + execs)) done_secs=$((done_secs + took)) segments=$((segments + 1))
        echo "$done_execs $done_secs $segments" > "$state"
        line="$line; campaign $done_execs executions in $done_secs s ($segments segments)"
        [ "$interrupted" -eq 1 ] && line="$line, interrupted"
    fi
    echo "== $line"
    echo "$line" > "$work/$t.line"
    [ "$rc" -eq 0 ] && [ "$crashes" -eq 0 ]
}

# The short pass runs RAMFORGE_FUZZ_JOBS targets at once (default 2: CI's two cores), each
# target's output printed whole when it ends; a long campaign runs one target at a time.
jobs="${RAMFORGE_FUZZ_JOBS:-2}"
[ "$mode" = long ] && jobs=1
failed=0
if [ "$jobs" -le 1 ]; then
    for t in "${targets[@]}"; do fuzz_one "$t" || failed=1; done
else
    for t in "${targets[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        { if fuzz_one "$t" >"$work/$t.out" 2>&1; then echo 0; else echo 1; fi >"$work/$t.rc"
          cat "$work/$t.out"; } &
    done
    wait
    for t in "${targets[@]}"; do [ "$(cat "$work/$t.rc" 2>/dev/null)" = 0 ] || failed=1; done
fi
echo "== summary ($(date -u '+%Y-%m-%d %H:%M UTC'))"
for t in "${targets[@]}"; do echo "   $(cat "$work/$t.line" 2>/dev/null || echo "$t: no summary (the pass did not finish)")"; done
exit "$failed"
