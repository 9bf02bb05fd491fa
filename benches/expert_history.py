#!/usr/bin/env python3
"""Expert history (issue 34): a restarted run's first decoded tokens with and without the history.

For one MoE GGUF file whose routing is skewed (benches/expert_history.sh makes a synthetic qwen3moe
with `synth --router-skew`):
  1. one priming run (`run --ram`, a cache directory of its own as XDG_CACHE_HOME) leaves the
     expert history there;
  2. then --runs rounds, each a cold restarted run with the history and one with
     --no-expert-history (which neither loads nor saves it, so every round starts from the primed
     history), in alternating order, every one under ../shared/bench/limits.sh (a memory cgroup
     of --mem-frac x the file, reads capped at --read-bps, the file dropped from the page cache);
     each decodes --gen-tokens (default 33: the first token comes from the prompt's pass, so 32
     decoding passes) greedy tokens after a short prompt.
Reports, medians over the rounds: decode tok/s of those tokens, the expert hit rate over the first
32 decoding passes (`experts.first_decode_hit_rate` of `run --json`), the priming run's hit rate
over its last 32, the experts preloaded, and the ratio with/without. --json prints one object.
Not a test: run it on an otherwise idle machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIMITS = HERE.parent.parent / "shared" / "bench" / "limits.sh"
MARGIN = 24 << 20  # cgroup limit - --ram: the binary, its heap, the page tables
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def run(args, cache, ram, extra, limited=True):
    cmd = [args.ramforge, "run", args.model, "-p", PROMPT, "-n", str(args.gen_tokens), "--ram", str(ram),
           "-t", str(args.threads), "--json", "--ignore-eos", *extra]
    if limited:
        cmd = ["bash", str(LIMITS), "--mem", str(args.limit), "--read-bps", str(args.read_bps), "--file",
               args.model, "--", *cmd]
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if p.returncode != 0:
        sys.exit(f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def summary(rs):
    x = [r["experts"] or {} for r in rs]
    return {
        "decode_tokens_per_sec": statistics.median(r["decode_tokens_per_sec"] for r in rs),
        "first_decode_hit_rate": statistics.median(e.get("first_decode_hit_rate", 0) for e in x),
        "preloaded": statistics.median(e.get("preloaded", 0) for e in x),
        "decode_bytes_read": statistics.median(r["decode_bytes_read"] for r in rs),
        "runs": rs,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--mem-frac", type=float, default=0.3)
    p.add_argument("--read-bps", type=int, default=400_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--gen-tokens", type=int, default=33)
    p.add_argument("--ramforge", required=True)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    size = os.path.getsize(args.model)
    args.limit = int(size * args.mem_frac)
    ram = args.limit - MARGIN
    with tempfile.TemporaryDirectory(prefix="ramforge-history-bench-") as cache:
        primed = run(args, cache, ram, [], limited=False)
        rounds = {"with history": [], "without": []}
        for i in range(args.runs):
            order = list(rounds) if i % 2 == 0 else list(reversed(rounds))
            for name in order:
                rounds[name].append(run(args, cache, ram, [] if name == "with history" else ["--no-expert-history"]))
    report = {"model": args.model, "model_bytes": size, "limit_bytes": args.limit, "ram_bytes": ram,
              "read_bps": args.read_bps, "threads": args.threads, "gen_tokens": args.gen_tokens, "runs": args.runs,
              "primed_last_decode_hit_rate": (primed["experts"] or {}).get("last_decode_hit_rate"),
              **{k: summary(v) for k, v in rounds.items()}}
    w, wo = report["with history"], report["without"]
    report["ratio"] = w["decode_tokens_per_sec"] / wo["decode_tokens_per_sec"]
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"model {Path(args.model).name} ({size / 2**20:.0f} MiB), memory {args.mem_frac:.0%} of it, reads capped at "
          f"{args.read_bps / 1e6:.0f} MB/s, {args.gen_tokens} tokens, medians of {args.runs} alternating cold runs")
    print(f"priming run ended at {100 * (report['primed_last_decode_hit_rate'] or 0):.0f}% hits (last 32 tokens)")
    for name, s in (("with history", w), ("without", wo)):
        print(f"{name:>13}: {s['decode_tokens_per_sec']:7.2f} tok/s, first 32 tokens {100 * s['first_decode_hit_rate']:.0f}% "
              f"hits, {s['decode_bytes_read'] / 2**20:.1f} MiB read decoding, {s['preloaded']:.0f} experts preloaded")
    print(f"ratio with/without: {report['ratio']:.2f}x")


if __name__ == "__main__":
    main()
