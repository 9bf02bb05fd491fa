#!/usr/bin/env bash
# Bounded fuzzing of the GGUF reader with cargo-fuzz (libFuzzer).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]
#
# SECONDS_PER_TARGET defaults to 60; TARGETs default to every target in fuzz/fuzz_targets.
# Installs cargo-fuzz if it is missing. cargo-fuzz needs nightly-only rustc flags; on the
# stable toolchain RUSTC_BOOTSTRAP=1 unlocks them (verified with rustc 1.95 stable).
# The gguf_parse corpus is seeded by the writer and by shrunken real headers (the models in
# $RAMFORGE_MODELS, if present). A crash fails the script; the input is saved under
# fuzz/artifacts/<target>/ -- turn it into a regression test in ramforge-gguf/tests/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
secs="${1:-60}"
shift || true
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
models="${RAMFORGE_MODELS:-$root/models}"
fuzz_target_dir="${RAMFORGE_FUZZ_TARGET_DIR:-$root/fuzz/target}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

echo "== seed corpus"
seeds=()
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf qwen2ish-Q8_0.gguf smollm2-IQ4_XS.gguf; do
    [ -f "$models/$m" ] && seeds+=("$models/$m")
done
cargo run -q -p ramforge-gguf --example fuzz_corpus -- fuzz/corpus/gguf_parse "${seeds[@]}"

for t in "${targets[@]}"; do
    echo "== fuzz $t for ${secs}s"
    mkdir -p "fuzz/corpus/$t"
    (cd fuzz && cargo fuzz run "$t" --target-dir "$fuzz_target_dir" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1)
done
