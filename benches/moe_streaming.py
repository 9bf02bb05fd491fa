#!/usr/bin/env python3
"""MoE beyond RAM (issue 16): RAMforge's expert streaming against llama.cpp's pure mmap.

For one MoE GGUF file, or a split one named by its first part (benches/moe_streaming.sh makes the
~1 GB synthetic qwen3moe, `--scale` the ~11 GB split glm4moe of issue 29):
  cold: every run under ../shared/bench/limits.sh (a memory cgroup of --mem-frac x the file,
        reads from the file's device capped at --read-bps, the file dropped from the page cache
        first); RAMforge `bench --ram (limit - margin)` and llama.cpp with use_extra_bufts = false
        (pure mmap) alternate, --runs each, medians. The storage limit of RAMforge is
        read_bps / (bytes it read per decoded token); "% of limit" is its tok/s against that.
  sweep (--sweep): the same for memory at 10%..100% of the file, with RAMforge's hit rates.
  warm (--warm): the file in the page cache, no cgroup; RAMforge at --ram --mem-frac x the file
        against RAMforge all-resident.
  checks (--checks): under the cold limits, the wall time of `plan` (open every part, plan) and
        the greedy tokens of `run` against those of a run without limits.
Prints a table; --json prints one JSON object instead.
"""

import argparse
import json
import os
import re
import statistics
import time
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vs_llamacpp  # noqa: E402  (the llama.cpp child and the wait4 runner)

LIMITS = HERE.parent.parent / "shared" / "bench" / "limits.sh"
MARGIN = 24 << 20  # cgroup limit - RAMforge --ram: the binary, its heap, the page tables


def model_files(model):
    """The model's files: every part of a split model (`PREFIX-00001-of-0000N.gguf`), else itself."""
    m = re.match(r"(.*)-00001-of-(\d{5})\.gguf$", model)
    if not m:
        return [model]
    n = int(m.group(2))
    return [f"{m.group(1)}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]


def model_size(model):
    return sum(os.path.getsize(f) for f in model_files(model))


def evict(model):
    """Drops every part of the model from the page cache (limits.sh drops the first only)."""
    os.sync()
    for f in model_files(model):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def engine_cmds(args, ram):
    common = ["-p", str(args.prompt_tokens), "-n", str(args.gen_tokens)]
    rf = [args.ramforge, "--quiet", "bench", "-m", args.model, "-t", str(args.threads), *common, "--json"]
    if ram is not None:
        rf += ["--ram", str(ram)]
    llama = [args.python, vs_llamacpp.__file__, "--child-llama", args.model, "--threads", str(args.threads),
             "--prompt-tokens", str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens), "--no-extra-bufts"]
    return {"ramforge": rf, "llama.cpp mmap": llama}


def run(cmd, limit=None, read_bps=None, model=None, timeout=1800):
    if limit is not None:
        evict(model)
        cmd = ["bash", str(LIMITS), "--mem", str(limit), "--read-bps", str(read_bps), "--file", model, "--", *cmd]
    rc, out, err, maxrss, wall = vs_llamacpp.wait4_child(cmd, timeout=timeout)
    result = vs_llamacpp.last_json(out) or {}
    result.update({"exit_code": rc, "child_maxrss_bytes": maxrss, "wall_secs": wall,
                   "ok": rc == 0 and "decode_tokens_per_sec" in result})
    if not result["ok"]:
        tail = err.strip().splitlines()
        result["error"] = f"exit {rc}" + (f": {tail[-1]}" if tail else "")
    return result


def median_runs(args, frac, read_bps):
    """Alternating runs of both engines under the cold limits at `frac` of the file."""
    size = model_size(args.model)
    limit = int(size * frac)
    cmds = engine_cmds(args, max(limit - MARGIN, 1))
    runs = {name: [] for name in cmds}
    for _ in range(args.runs):
        for name, cmd in cmds.items():
            runs[name].append(run(cmd, limit, read_bps, args.model, args.timeout))
    out = {"mem_frac": frac, "limit_bytes": limit, "ram_bytes": limit - MARGIN}
    for name, rs in runs.items():
        ok = [r for r in rs if r["ok"]]
        entry = {"runs": rs, "ok": len(ok)}
        if ok:
            tps = statistics.median(r["decode_tokens_per_sec"] for r in ok)
            mid = min(ok, key=lambda r: abs(r["decode_tokens_per_sec"] - tps))
            entry.update({"tokens_per_sec": tps, "bytes_read_per_token": mid.get("bytes_read_per_token"),
                          "peak_rss_bytes": mid.get("peak_rss_bytes") or mid["child_maxrss_bytes"],
                          "experts": mid.get("experts")})
        out[name] = entry
    rf = out["ramforge"]
    if rf.get("bytes_read_per_token"):
        rf["storage_limit_tokens_per_sec"] = read_bps / rf["bytes_read_per_token"]
        rf["share_of_limit"] = rf["tokens_per_sec"] / rf["storage_limit_tokens_per_sec"]
    ll = out["llama.cpp mmap"]
    if rf.get("tokens_per_sec") and ll.get("tokens_per_sec"):
        out["ratio"] = rf["tokens_per_sec"] / ll["tokens_per_sec"]
    return out


def warm(args):
    """RAMforge with the file in the page cache: --ram at mem-frac of the file against all-resident."""
    size = model_size(args.model)
    subprocess.run(["cat", *model_files(args.model)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    res = {"resident": [], "budget": []}
    for _ in range(args.runs):
        res["resident"].append(run(engine_cmds(args, None)["ramforge"], timeout=args.timeout))
        res["budget"].append(run(engine_cmds(args, int(size * args.mem_frac))["ramforge"], timeout=args.timeout))
    med = {k: statistics.median(r["decode_tokens_per_sec"] for r in v if r["ok"]) for k, v in res.items()}
    return {"mem_frac": args.mem_frac, "resident_tokens_per_sec": med["resident"],
            "budget_tokens_per_sec": med["budget"], "share": med["budget"] / med["resident"], "runs": res}


def checks(args):
    """Under the cold limits at --mem-frac: how long `plan` takes (opening every part), and
    whether greedy `run` tokens equal those of a run without limits."""
    limit = int(model_size(args.model) * args.mem_frac)
    ram = str(max(limit - MARGIN, 1))
    plan = [args.ramforge, "--quiet", "plan", args.model, "--ram", ram, "--json"]
    evict(args.model)
    started = time.monotonic()
    rc, _, err, _, _ = vs_llamacpp.wait4_child(
        ["bash", str(LIMITS), "--mem", str(limit), "--read-bps", str(args.read_bps), "--file", args.model,
         "--", *plan], timeout=args.timeout)
    plan_secs = time.monotonic() - started
    gen = [args.ramforge, "--quiet", "run", args.model, "-p", "The capital of France is", "-n",
           str(args.gen_tokens), "-t", str(args.threads), "--json"]
    limited = run(gen + ["--ram", ram], limit, args.read_bps, args.model, args.timeout)
    free = run(gen, timeout=args.timeout)
    return {"plan_secs": plan_secs, "plan_exit_code": rc, "plan_error": err.strip().splitlines()[-1:] if rc else [],
            "tokens_limited": limited.get("tokens"), "tokens_free": free.get("tokens"),
            "tokens_identical": limited.get("tokens") is not None and limited.get("tokens") == free.get("tokens")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--mem-frac", type=float, default=0.3)
    p.add_argument("--read-bps", type=int, default=400_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-p", "--prompt-tokens", type=int, default=1)
    p.add_argument("-n", "--gen-tokens", type=int, default=16)
    p.add_argument("--sweep", action="store_true", help="also memory at 10%%..100%% of the file")
    p.add_argument("--warm", action="store_true", help="also the warm-file case")
    p.add_argument("--checks", action="store_true", help="also plan time and greedy identity under the limits")
    p.add_argument("--ramforge", required=True)
    p.add_argument("--python", required=True, help="python with llama_cpp 0.3.36")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    report = {"model": args.model, "model_bytes": model_size(args.model), "read_bps": args.read_bps,
              "threads": args.threads, "gen_tokens": args.gen_tokens, "runs": args.runs}
    fracs = [args.mem_frac] + ([0.1, 0.2, 0.5, 0.7, 1.0] if args.sweep else [])
    report["cold"] = [median_runs(args, f, args.read_bps) for f in fracs]
    if args.warm:
        report["warm"] = warm(args)
    if args.checks:
        report["checks"] = checks(args)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    m = 2**20
    print(f"model {Path(args.model).name} ({report['model_bytes'] / m:.0f} MiB), {args.threads} threads, "
          f"{args.gen_tokens} decoded tokens, reads capped at {args.read_bps / 1e6:.0f} MB/s, "
          f"medians of {args.runs} alternating runs")
    head = (f"{'memory':>7} {'RAMforge tok/s':>15} {'read/token':>11} {'% of limit':>10} {'hit rate':>9} "
            f"{'peak RSS':>9} {'llama.cpp mmap':>15} {'ratio':>7}")
    print(head)
    print("-" * len(head))
    for row in sorted(report["cold"], key=lambda r: r["mem_frac"]):
        rf, ll = row["ramforge"], row["llama.cpp mmap"]
        x = rf.get("experts") or {}
        hit = f"{100 * x['decode_hit_rate']:.0f}%" if x else "-"
        print(f"{row['mem_frac']:>7.0%} {rf.get('tokens_per_sec', float('nan')):>15.2f} "
              f"{(rf.get('bytes_read_per_token') or 0) / m:>9.1f}Mi {100 * rf.get('share_of_limit', 0):>9.0f}% "
              f"{hit:>9} {(rf.get('peak_rss_bytes') or 0) / m:>7.0f}Mi "
              f"{ll.get('tokens_per_sec', float('nan')):>15.2f} {row.get('ratio', float('nan')):>6.2f}x")
    for row in report["cold"]:
        x = row["ramforge"].get("experts") or {}
        if x.get("decode_read_ahead"):
            print(f"{row['mem_frac']:>7.0%}: hash-routed layers' experts read ahead: "
                  f"{x['decode_read_ahead']} while decoding, the compute waited "
                  f"{x['decode_ahead_wait_secs']:.3f} s for them (all misses: "
                  f"{x['decode_wait_secs'] + x['decode_ahead_wait_secs']:.3f} s)")
    if "checks" in report:
        c = report["checks"]
        print(f"plan under the limits: {c['plan_secs']:.1f} s (exit {c['plan_exit_code']}); greedy tokens "
              f"under the limits {'identical to' if c['tokens_identical'] else 'DIFFERENT from'} a run without")
    if "warm" in report:
        w = report["warm"]
        print(f"warm file, --ram {w['mem_frac']:.0%}: {w['budget_tokens_per_sec']:.2f} tok/s against "
              f"{w['resident_tokens_per_sec']:.2f} all-resident ({100 * w['share']:.0f}%)")


if __name__ == "__main__":
    main()
