#!/usr/bin/env bash
# The test step of scripts/test.sh: `cargo test --workspace`, with the test binaries run side by side.
#
#   scripts/test_binaries.sh
#
# cargo runs a workspace's test binaries one after another, and many of ours spend most of
# their time in one test (a llama.cpp reference run, a gguf-py oracle, a server) while the
# other core waits. Here cargo builds them all (`--no-run`), then RAMFORGE_TEST_JOBS of them
# (default 2) run at once, the slowest first, each from its package's folder with the
# CARGO_MANIFEST_DIR `cargo test` gives it (trybuild reads it); each binary's output is printed
# whole when it ends, with libtest's own lines (so the failure summary of scripts/test.sh still
# finds them). The doc tests follow, through cargo. Exits 1 if any binary failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${RAMFORGE_TEST_JOBS:-2}"
# Slowest first (each over a minute on a 2-core Zen 1 VM, 2026-12-06), so that the
# quick ones fill the gaps at the end rather than one long binary running alone.
slow_first="serve synth_goldens gguf_py_oracle golden gemma3 gemma3_chat inspect speculative"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo test --workspace --no-run --message-format=json-render-diagnostics >"$work/build.json" || exit 1
# One line per test binary: package folder, executable, target name.
python3 - "$work/build.json" "$slow_first" >"$work/binaries" <<'EOF' || exit 1
import json, os, sys
slow = sys.argv[2].split()
found = []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    found.append((os.path.dirname(m["manifest_path"]), m["executable"], m["target"]["name"]))
order = lambda b: slow.index(b[2]) if b[2] in slow else len(slow)
for b in sorted(found, key=order):
    print("\t".join(b))
EOF
echo "== $(wc -l <"$work/binaries") test binaries, $jobs at a time"
# As cargo does: a proc-macro crate's test binary links the toolchain's libstd dynamically.
LD_LIBRARY_PATH="$(rustc --print target-libdir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

run_binary() { # DIR EXE NAME: one binary, its output printed whole at its end
  local dir=$1 exe=$2 name="${1#"$root"/}: $3" out t0=$SECONDS rc=0
  out="$(mktemp -p "$work")"
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe") </dev/null >"$out" 2>&1 || rc=$?
  {
    flock 9
    echo "     Running $name (${exe#"$root"/})"
    cat "$out"
    [ $rc -eq 0 ] || echo "error: test binary $name failed (exit $rc)"
    echo "     ($name took $((SECONDS - t0)) s)"
  } 9>>"$work/lock"
  return $rc
}

failed=0 running=0
while IFS=$'\t' read -r dir exe name; do
  if [ $running -ge "$jobs" ]; then wait -n || failed=1; running=$((running - 1)); fi
  run_binary "$dir" "$exe" "$name" &
  running=$((running + 1))
done <"$work/binaries"
while [ $running -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done

echo "== doc tests"
cargo test --workspace --doc --no-fail-fast || failed=1
exit $failed
