#!/usr/bin/env python3
"""Out-of-core decode under a memory cgroup limit, RAMforge vs llama.cpp (issue 8, steps 2-4).

For one GGUF file (usually a `ramforge-tools synth` model, made by benches/out_of_core.sh):
  2. storage bandwidth: two 4 MiB-block sequential reads of the evicted file, O_DIRECT (where
     allowed) and buffered (each block dropped from the page cache once read); after the llama.cpp
     runs, bw is the largest of those and llama.cpp's pure-mmap rate (bytes it read x its tok/s);
  3. before every run the file is evicted from the page cache (posix_fadvise DONTNEED), and the
     engine runs in a fresh child memory cgroup (v2 memory.max or v1 memory.limit_in_bytes, a child
     of this process's cgroup; the limit counts page cache too) of --limit-frac x file size:
     RAMforge `bench --ram (limit - margin)`, llama.cpp with defaults, llama.cpp with
     use_extra_bufts = false (pure mmap);
  4. prints tok/s, bytes read per decoded token, peak RSS, cgroup peak, and the physical limit
     bw / (model - resident), with resident = RAMforge's pinned weight bytes (`plan --json`).
`--json` prints one JSON object instead.
"""

import argparse
import json
import mmap
import os
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_llamacpp  # noqa: E402  (the llama.cpp child and the wait4 runner)

BLOCK = 4 << 20  # RAMforge's DROP_CHUNK


def evict(path):
    """Drop the file's pages from the page cache (clean pages only, hence the fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_bytes(path):
    """Bytes of the file in the page cache (util-linux fincore), or None where unavailable."""
    import subprocess

    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True, timeout=30)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def read_rate(path, direct):
    """Sequential read rate of the whole file in BLOCK reads, after eviction: O_DIRECT, or
    buffered with each block dropped from the page cache once read (as RAMforge streams, in
    DROP_CHUNK steps). None where O_DIRECT is refused (e.g. tmpfs)."""
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    evict(path)
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    except OSError:
        return None
    total = 0
    started = time.perf_counter()
    try:
        while True:
            try:
                n = os.preadv(fd, [buf], total)
            except OSError:
                if direct and total == 0:
                    return None
                raise
            if n <= 0:
                break
            if not direct:
                os.posix_fadvise(fd, total, n, os.POSIX_FADV_DONTNEED)
            total += n
    finally:
        os.close(fd)
    secs = time.perf_counter() - started
    return {"bytes": total, "secs": secs, "bytes_per_sec": total / secs if secs > 0 else 0.0}


def storage_bandwidth(path):
    """The faster of the two sequential reads of `read_rate`: O_DIRECT and buffered (some
    storage serves the page cache's asynchronous readahead much faster than direct reads)."""
    rates = {"O_DIRECT": read_rate(path, True), "buffered": read_rate(path, False)}
    how, best = max(((k, v) for k, v in rates.items() if v), key=lambda kv: kv[1]["bytes_per_sec"])
    return {"method": how, **best, "rates": {k: v and v["bytes_per_sec"] for k, v in rates.items()}}


# ---------------------------------------------------------------- memory cgroups


class MemoryCgroups:
    """Fresh child memory cgroups of this process's own cgroup (v2 preferred, v1 otherwise)."""

    def __init__(self):
        self.version, self.parent, self.why = self._find()
        self.count = 0

    @staticmethod
    def _mounts():
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ", 1)
                fields, rest = left.split(), right.split()
                yield fields[3], fields[4], rest[0], rest[-1]  # root, mount point, fstype, super options

    def _find(self):
        with open("/proc/self/cgroup") as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f]
        mounts = list(self._mounts())
        v2_path = next((p for _, ctrl, p in entries if ctrl == ""), None)
        v1_path = next((p for _, ctrl, p in entries if "memory" in ctrl.split(",")), None)
        notes = []
        for root, point, fstype, _ in mounts:
            if fstype == "cgroup2" and v2_path is not None:
                try:
                    controllers = open(os.path.join(point, "cgroup.controllers")).read().split()
                except OSError:
                    continue
                if "memory" not in controllers:
                    notes.append(f"cgroup2 at {point} has no memory controller")
                    continue
                rel = os.path.relpath(v2_path, root) if v2_path.startswith(root) else v2_path.lstrip("/")
                parent = os.path.normpath(os.path.join(point, rel))
                if os.access(parent, os.W_OK):
                    return 2, parent, ""
                notes.append(f"{parent} not writable")
        for root, point, fstype, opts in mounts:
            if fstype == "cgroup" and "memory" in opts.split(",") and v1_path is not None:
                rel = os.path.relpath(v1_path, root) if v1_path.startswith(root) else v1_path.lstrip("/")
                parent = os.path.normpath(os.path.join(point, rel))
                if os.path.isdir(parent) and os.access(parent, os.W_OK):
                    return 1, parent, ""
                notes.append(f"v1 memory cgroup {parent} missing or not writable")
        return None, None, "; ".join(notes) or "no memory cgroup controller mounted"

    def create(self, limit):
        self.count += 1
        path = os.path.join(self.parent, f"ramforge-ooc-{os.getpid()}-{self.count}")
        os.mkdir(path)
        if self.version == 2:
            write(path, "memory.max", limit)
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                write(path, "memory.swap.max", 0)
        else:
            write(path, "memory.limit_in_bytes", limit)
            if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                write(path, "memory.memsw.limit_in_bytes", limit)
        return path

    def stats(self, path):
        if self.version == 2:
            peak = read_int(path, "memory.peak")
            events = read_kv(path, "memory.events")
            return {"peak_bytes": peak, "oom_kills": events.get("oom_kill"), "limit_hits": events.get("max")}
        oom = read_kv(path, "memory.oom_control")
        return {"peak_bytes": read_int(path, "memory.max_usage_in_bytes"), "oom_kills": oom.get("oom_kill"),
                "limit_hits": read_int(path, "memory.failcnt")}

    def remove(self, path):
        if self.version == 1 and os.path.exists(os.path.join(path, "memory.force_empty")):
            try:
                write(path, "memory.force_empty", 0)
            except OSError:
                pass
        for _ in range(50):
            try:
                os.rmdir(path)
                return
            except OSError:
                time.sleep(0.1)
        print(f"warning: could not remove cgroup {path}", file=sys.stderr)


def write(directory, name, value):
    with open(os.path.join(directory, name), "w") as f:
        f.write(str(value))


def read_int(directory, name):
    try:
        return int(open(os.path.join(directory, name)).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kv(directory, name):
    try:
        return {k: int(v) for k, v in (line.split() for line in open(os.path.join(directory, name)))}
    except (OSError, ValueError):
        return {}


def run_limited(cmd, cgroups, limit, model, timeout):
    """Evict the model, run cmd in a fresh cgroup limited to `limit`; return its JSON plus our measures."""
    evict(model)
    resident_before = cached_bytes(model)
    path = cgroups.create(limit) if cgroups.version and limit else None

    def enter():
        if path:
            write(path, "cgroup.procs", os.getpid())

    try:
        rc, out, err, maxrss, wall = vs_llamacpp.wait4_child(cmd, preexec_fn=enter, timeout=timeout)
        stats = cgroups.stats(path) if path else {}
    finally:
        if path:
            cgroups.remove(path)
    result = vs_llamacpp.last_json(out) or {}
    result.update({"exit_code": rc, "child_maxrss_bytes": maxrss, "wall_secs": wall, "cgroup": stats,
                   "cached_before_bytes": resident_before, "ok": rc == 0 and "decode_tokens_per_sec" in result})
    if not result["ok"]:
        tail = err.strip().splitlines()
        result["error"] = ("killed by signal %d" % -rc if rc < 0 else f"exit {rc}") + (
            f": {tail[-1]}" if tail else "")
    return result


# ---------------------------------------------------------------- the benchmark


def plan_resident(rf_bin, model, ram, ctx):
    """RAMforge's resident weight bytes at this budget (pinned layers, plus output if resident)."""
    import subprocess

    out = subprocess.run([rf_bin, "--quiet", "plan", model, "--ram", str(ram), "--ctx", str(ctx), "--json"],
                         capture_output=True, text=True)
    plan = vs_llamacpp.last_json(out.stdout)
    if not plan or not plan.get("fits"):
        print(f"warning: ramforge-tools plan at --ram {ram}: {out.stderr.strip() or 'does not fit'}", file=sys.stderr)
        return None, plan
    resident = (plan.get("pinned_layer_bytes") or 0) + (plan.get("output_bytes") or 0) * bool(plan.get("output_resident"))
    return resident, plan


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--limit-frac", type=float, default=0.5, help="cgroup limit as a fraction of the file (0.5)")
    p.add_argument("--margin", default=24 << 20, type=int,
                   help="RAMforge --ram = limit - margin bytes (default 24 MiB)")
    p.add_argument("-t", "--threads", type=int, default=2)
    # One prompt token (the prefill is not what is measured here). RAMforge's `bench` reports
    # bytes read per decoded token from the decode phase alone; llama.cpp's child measures its
    # decode loop alike.
    p.add_argument("-p", "--prompt-tokens", type=int, default=1)
    p.add_argument("-n", "--gen-tokens", type=int, default=16)
    p.add_argument("--ramforge", required=True, help="ramforge-tools binary")
    p.add_argument("--python", required=True, help="python with llama_cpp 0.3.36")
    p.add_argument("--skip-llama-default", action="store_true", help="skip llama.cpp with repacking on")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per engine run (killed after)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    model = args.model
    model_bytes = os.path.getsize(model)
    limit = int(model_bytes * args.limit_frac)
    ram = limit - args.margin
    if ram <= 0:
        sys.exit(f"error: limit {limit} bytes leaves no RAMforge budget after the {args.margin}-byte margin")
    ctx = args.prompt_tokens + args.gen_tokens
    cgroups = MemoryCgroups()
    if not cgroups.version:
        print(f"warning: no writable memory cgroup ({cgroups.why}); running WITHOUT a memory limit",
              file=sys.stderr)

    def say(msg):
        if not args.json:
            print(msg, file=sys.stderr, flush=True)

    say(f"{Path(model).name}: {model_bytes / 2**20:.1f} MiB; cgroup v{cgroups.version} limit "
        f"{limit / 2**20:.1f} MiB ({args.limit_frac:.0%}), RAMforge --ram {ram / 2**20:.1f} MiB")
    say("measuring storage bandwidth (O_DIRECT and buffered sequential reads)...")
    disk = storage_bandwidth(model)
    resident, plan = plan_resident(args.ramforge, model, ram, ctx)

    common = ["-t", str(args.threads), "-p", str(args.prompt_tokens), "-n", str(args.gen_tokens)]
    runs = {}
    say("RAMforge ...")
    runs["ramforge"] = run_limited([args.ramforge, "--quiet", "bench", "-m", model, "--ram", str(ram), *common,
                                    "--json"], cgroups, limit, model, args.timeout)
    llama = [args.python, vs_llamacpp.__file__, "--child-llama", model, "--threads", str(args.threads),
             "--prompt-tokens", str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens)]
    if not args.skip_llama_default:
        say("llama.cpp (defaults: mmap + repacked weights) ...")
        runs["llama.cpp default"] = run_limited(llama, cgroups, limit, model, args.timeout)
    say("llama.cpp (use_extra_bufts = false: pure mmap) ...")
    runs["llama.cpp mmap"] = run_limited(llama + ["--no-extra-bufts"], cgroups, limit, model, args.timeout)

    # llama.cpp's achieved storage rate: what it really read per token (at most the file) x tok/s.
    mmap_run = runs["llama.cpp mmap"]
    llama_rate = 0.0
    if mmap_run["ok"]:
        per_token = min(model_bytes, mmap_run.get("bytes_read_per_token") or 0)
        llama_rate = per_token * mmap_run["decode_tokens_per_sec"]
    bw = max(disk["bytes_per_sec"], llama_rate)
    # What must come from storage per token: the engine's own plan (unpinned layers, the output
    # matrix when streamed, one embedding row); else the file less the pinned weights.
    streamed = (plan or {}).get("streamed_bytes_per_token")
    if streamed is None and resident is not None:
        streamed = model_bytes - resident
    physical = bw / streamed if streamed else None
    report = {
        "model": model, "model_bytes": model_bytes, "threads": args.threads, "gen_tokens": args.gen_tokens,
        "cgroup_version": cgroups.version, "cgroup_parent": cgroups.parent, "cgroup_note": cgroups.why,
        "limit_bytes": limit if cgroups.version else None, "ramforge_ram_bytes": ram,
        "disk_read": disk, "llama_mmap_read_rate_bytes_per_sec": llama_rate, "bw_bytes_per_sec": bw,
        "pinned_weight_bytes": resident, "model_minus_resident_bytes": streamed,
        "llama_mmap_model_bytes_x_tokens_per_sec": model_bytes * mmap_run.get("decode_tokens_per_sec", 0.0),
        "physical_limit_tokens_per_sec": physical, "physical_limit_all_streamed_tokens_per_sec": bw / model_bytes,
        "runs": runs,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print_report(report)


def print_report(r):
    m = 2**20
    mib = lambda v: "-" if v is None else f"{v / m:.1f} MiB"  # noqa: E731
    d = r["disk_read"]
    print(f"model     {Path(r['model']).name}  {r['model_bytes'] / m:.1f} MiB, {r['threads']} threads, "
          f"{r['gen_tokens']} decoded tokens")
    limit = f"{mib(r['limit_bytes'])} (cgroup v{r['cgroup_version']})" if r["cgroup_version"] else \
        f"NONE ({r['cgroup_note']})"
    print(f"limit     {limit}; RAMforge --ram {mib(r['ramforge_ram_bytes'])}")
    rates = ", ".join(f"{k} {'refused' if v is None else f'{v / m:.1f} MiB/s'}" for k, v in d["rates"].items())
    print(f"storage   {rates} ({d['bytes'] / m:.0f} MiB sequential, 4 MiB reads);"
          f" llama.cpp mmap read rate {r['llama_mmap_read_rate_bytes_per_sec'] / m:.1f} MiB/s"
          f" -> bw {r['bw_bytes_per_sec'] / m:.1f} MiB/s")
    if r["physical_limit_tokens_per_sec"] is not None:
        print(f"resident  {mib(r['pinned_weight_bytes'])} of layers/output pinned by RAMforge; model - resident ="
              f" {mib(r['model_minus_resident_bytes'])}/token -> physical limit"
              f" {r['physical_limit_tokens_per_sec']:.2f} tok/s"
              f" (whole file per token: {r['physical_limit_all_streamed_tokens_per_sec']:.2f} tok/s)")
    elif r["model_minus_resident_bytes"] == 0:
        print("resident  everything (RAMforge plans no storage reads per token): no storage limit")
    else:
        print("resident  unknown (ramforge-tools plan did not fit the budget)")
    head = f"{'engine':<18} {'tok/s':>8} {'read/token':>12} {'peak RSS':>11} {'cgroup peak':>12} {'% of phys':>10}  note"
    print(head)
    print("-" * len(head))
    phys = r["physical_limit_tokens_per_sec"]
    for name, run in r["runs"].items():
        cg = run.get("cgroup") or {}
        if run["ok"]:
            tps = run["decode_tokens_per_sec"]
            pct = f"{100 * tps / phys:.0f}%" if phys else "-"
            note = ""
            if cg.get("oom_kills"):
                note = f"{cg['oom_kills']} OOM kill(s) in cgroup"
            print(f"{name:<18} {tps:>8.2f} {mib(run.get('bytes_read_per_token')):>12} "
                  f"{mib(run['child_maxrss_bytes']):>11} {mib(cg.get('peak_bytes')):>12} {pct:>10}  {note}")
        else:
            print(f"{name:<18} {'failed':>8} {'-':>12} {mib(run['child_maxrss_bytes']):>11} "
                  f"{mib(cg.get('peak_bytes')):>12} {'-':>10}  {run.get('error', '')[:80]}"
                  + (f" (cgroup OOM kills: {cg['oom_kills']})" if cg.get("oom_kills") else ""))
    rf, ll = r["runs"].get("ramforge"), r["runs"].get("llama.cpp mmap")
    if rf and ll and rf["ok"] and ll["ok"] and ll["decode_tokens_per_sec"] > 0:
        print(f"RAMforge / llama.cpp pure mmap: {rf['decode_tokens_per_sec'] / ll['decode_tokens_per_sec']:.2f}x")


if __name__ == "__main__":
    main()
