#!/bin/sh
# Decode speed with and without a background CPU hog (issue 7: "threading that holds up on a
# busy 2-core machine ... must degrade gracefully, not 10x").
#
#   benches/cpu_hog.sh [--model M.gguf] [--threads 2] [--tokens 64] [--runs 3] [--ramforge BIN]
#                      [--own-session] [--pin-hog CPU]
#
# Each run is `ramforge-tools --quiet bench --json -p 8 -n TOKENS -t THREADS`, alternately
# without and with one busy-looping shell (`while :; do :; done`) started just before and
# killed (by its pid) just after. Prints the median decode tok/s of each and hog/quiet, and how
# many cores each process held (CPU seconds over wall seconds: RAMforge's from wait4, the hog's
# from /proc) and RAMforge's tok/s per core held, with and without the hog: whether a loss comes
# from fewer cores or from cores spent waiting. By default the hog runs in this script's session,
# and the scheduler shares the cores equally among the runnable threads of a session: 2 threads
# beside one hog hold about 4/3 of the 2 cores (a decode that scaled with its cores would keep
# about 0.67); spin-waiting thread pools collapse far below that. With --own-session the hog runs
# in a session of its own (setsid), as another program would: with autogroup scheduling each
# session then gets one core's worth, so RAMforge holds about one core whatever its threads.
# With --pin-hog CPU the hog is bound to that core (taskset), "a hog on one of the cores" taken
# literally: RAMforge can then hold the other core whole and a share of the hog's.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL="${RAMFORGE_MODELS:-$ROOT/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=2
TOKENS=64
RUNS=3
BIN=""
OWN_SESSION=""
PIN=""
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --ramforge) BIN="$2"; shift 2 ;;
        --own-session) OWN_SESSION=setsid; shift ;;
        --pin-hog) PIN="taskset -c $2"; shift 2 ;;
        -h|--help) sed -n '2,${/^#/!q;p;}' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --release -q -p ramforge-tools)
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/ramforge-tools"
fi
[ -f "$MODEL" ] || { echo "error: no model at $MODEL (run scripts/test.sh or pass --model)" >&2; exit 1; }

# Prints "decode_tok/s ramforge_cores hog_cores" of one bench run (hog_cores 0 without a hog).
decode_tps() {
    python3 - "$BIN" "$MODEL" "$TOKENS" "$THREADS" "${HOG:-}" <<'PY'
import json, os, resource, subprocess, sys, time
bin_, model, tokens, threads, hog = sys.argv[1:6]
tick = os.sysconf("SC_CLK_TCK")
def hog_secs():
    if not hog:
        return 0.0
    with open(f"/proc/{hog}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime
cpu0, hog0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), hog_secs(), time.monotonic()
out = subprocess.run([bin_, "--quiet", "bench", "--json", "--model", model, "-p", "8", "-n", tokens,
                      "-t", threads], check=True, capture_output=True, timeout=600).stdout
wall, hog1, cpu1 = time.monotonic() - t0, hog_secs(), resource.getrusage(resource.RUSAGE_CHILDREN)
ours = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / wall
print(json.loads(out)["decode_tokens_per_sec"], f"{ours:.3f}", f"{(hog1 - hog0) / wall:.3f}")
PY
}

HOG=""
stop_hog() { if [ -n "$HOG" ]; then kill "$HOG" 2>/dev/null || true; wait "$HOG" 2>/dev/null || true; HOG=""; fi; }
trap stop_hog EXIT INT TERM

QUIET=""
BUSY=""
i=0
decode_tps >/dev/null # warm-up: page cache, CPU frequency
while [ "$i" -lt "$RUNS" ]; do
    QUIET="$QUIET,$(decode_tps)"
    $OWN_SESSION $PIN sh -c 'while :; do :; done' &
    HOG=$!
    BUSY="$BUSY,$(decode_tps)"
    stop_hog
    i=$((i + 1))
done

python3 - "$THREADS" "$QUIET" "$BUSY" <<'PY'
import statistics, sys
threads = sys.argv[1]
quiet, busy = ([[float(x) for x in run.split()] for run in arg.split(",") if run] for arg in sys.argv[2:4])
med = lambda runs, k: statistics.median(r[k] for r in runs)
q, b = med(quiet, 0), med(busy, 0)
print(f"threads {threads}: decode tok/s without hog {q:.2f}, with one CPU hog {b:.2f}, ratio {b / q:.2f}")
print(f"  runs without: {' '.join(f'{r[0]:.2f}' for r in quiet)}; with: {' '.join(f'{r[0]:.2f}' for r in busy)}")
cq, cb, ch = med(quiet, 1), med(busy, 1), med(busy, 2)
print(f"  cores held (medians): RAMforge {cq:.2f} quiet, {cb:.2f} with the hog, the hog {ch:.2f}; "
      f"tok/s per core held {q / cq:.1f} quiet, {b / cb:.1f} with the hog")
PY
