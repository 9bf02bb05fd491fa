#!/usr/bin/env bash
# The ARM and macOS checks (a CI step of scripts/test.sh; issue #36):
#   1. clippy for aarch64-apple-darwin (all targets) and a check of x86_64-apple-darwin, with
#      `--no-default-features` (the HTTPS feature's `ring` compiles C, which needs Apple's SDK);
#   2. an aarch64 Linux cross build (Debian's cross gcc links it): ramforge-quant's unit tests,
#      the NEON kernels' bit-for-bit tests among them, run under qemu-user;
#   3. greedy generation on the default model and a Q4_K_M model under qemu (the engine's `greedy`
#      example: the engine alone, without the server's dependencies), with the detected
#      instruction set (which must be NEON-based, not the scalar fallback) and with `neon` forced:
#      its tokens must equal the x86-64 build's reference (scalar) kernels' tokens, to which the
#      aarch64 kernels are bit-exact.
# Installs what it needs: rustup targets, and qemu-user and the aarch64 cross gcc from Debian.
# Uses the models scripts/test.sh fetched ($RAMFORGE_MODELS).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
models="${RAMFORGE_MODELS:-$root/models}"
# Q4_1 (the default model) and Q4_K_M (Q4_K, Q6_K and more): the legacy and K-quant kernels.
gen_models=("$models/SmolLM2-135M-Instruct.Q4_1.gguf" "$models/gemma-3-270m-q4_k_m.gguf")
linux=aarch64-unknown-linux-gnu

echo "== arm: toolchains (at ${SECONDS} s)"
installed="$(rustup target list --installed)"
for t in $linux aarch64-apple-darwin x86_64-apple-darwin; do
  grep -qx "$t" <<<"$installed" || rustup target add "$t"
done
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  command -v apt-get >/dev/null || { echo "error: qemu-aarch64 or aarch64-linux-gnu-gcc missing, and no apt-get" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi

echo "== arm: clippy aarch64-apple-darwin, check x86_64-apple-darwin (at ${SECONDS} s)"
cargo clippy --workspace --all-targets --target aarch64-apple-darwin --no-default-features -- -D warnings
cargo check --workspace --lib --bins --target x86_64-apple-darwin --no-default-features

echo "== arm: ramforge-quant unit tests on $linux under qemu (at ${SECONDS} s)"
cargo test -p ramforge-quant --lib --profile cross --target $linux

echo "== arm: greedy generation under qemu against the x86-64 reference kernels (at ${SECONDS} s)"
cargo build -q --profile cross -p ramforge-engine --example greedy --target $linux
# The x86-64 side is the example of the workspace's test build, which scripts/test.sh's test step
# has just made (`cargo test` builds examples; so this is a no-op there): with RAMFORGE_ISA=scalar
# its optimization level does not matter.
cargo test -q --workspace --no-run
echo "== arm: the runs (at ${SECONDS} s)"
arm_bin="target/$linux/cross/examples/greedy"
x86_bin="target/debug/examples/greedy"
generate() { # generate MODEL BINARY [RUNNER...]: "ISA TOKEN,TOKEN,..." of a short greedy run
  local model=$1 bin=$2; shift 2
  "$@" "$bin" "$model" "The capital of France is" 8
}
qemu=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
for model in "${gen_models[@]}"; do
  reference=$(RAMFORGE_ISA=scalar generate "$model" "$x86_bin")
  detected=$(generate "$model" "$arm_bin" "${qemu[@]}")
  neon=$(RAMFORGE_ISA=neon generate "$model" "$arm_bin" "${qemu[@]}")
  echo "$(basename "$model"):"
  echo "  x86-64 scalar:   $reference"
  echo "  aarch64:         $detected"
  echo "  aarch64 (neon):  $neon"
  case "${detected%% *}" in neon|dotprod|i8mm) ;; *) echo "error: aarch64 ran ${detected%% *}, not a NEON instruction set" >&2; exit 1 ;; esac
  # qemu's default CPU has i8mm; without it the kernel tests above skip the smmla tables.
  [ "${detected%% *}" = i8mm ] || { echo "error: qemu's CPU ran ${detected%% *}, not i8mm: the smmla kernels went untested" >&2; exit 1; }
  [ "${neon%% *}" = neon ] || { echo "error: RAMFORGE_ISA=neon ran ${neon%% *}" >&2; exit 1; }
  for got in "$detected" "$neon"; do
    [ "${got#* }" = "${reference#* }" ] || { echo "error: aarch64 tokens differ from the x86-64 reference's" >&2; exit 1; }
  done
done
echo "== arm: ok (at ${SECONDS} s)"
