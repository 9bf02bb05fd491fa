#!/usr/bin/env python3
"""Side-by-side speed of RAMforge and llama.cpp on the same GGUF file (issue 7, "Benchmarks").

Both engines get the same file, the same thread count and the same prompt: the token ids
(i * 7919 + 13) % n_vocab for i in 0..P (what `ramforge-tools bench` feeds), processed as one
batch (prefill), then N greedy tokens decoded one at a time (decode; end-of-generation is ignored
because the loop never looks for it). Every run is a fresh child process, so each side's peak RSS
is the child's own (wait4 ru_maxrss). One warm-up run per engine is discarded, then the runs
alternate between the engines so that load from other processes hits both alike.

    benches/vs_llamacpp.py [MODEL.gguf ...] [--threads 2] [--runs 5] [--prompt-tokens 128]
                           [--gen-tokens 64] [--json]
    benches/vs_llamacpp.py --table [MODEL.gguf ...] [--prefill 500,2000] [--depths 0,2000] ...

`--table` prints one row per model with prefill speed at each `--prefill` length and decode
speed at each `--depths` depth (decode after a D-token prompt; depth 0 is a 1-token prompt).
Each distinct prompt length is its own child run (a long prompt's run gives both its prefill
and its decode-at-depth figure); every measured round runs each length on both engines,
alternating which goes first.

The llama.cpp side is llama-cpp-python 0.3.36 from the reference venv
(../shared/reference/setup.sh); `--python` or $RAMFORGE_REFERENCE_PY picks an existing one.
The same file run with `--child-llama MODEL` inside that venv is the llama.cpp child (also
used by benches/out_of_core.py); it prints one JSON object.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_SETUP = ROOT.parent / "shared" / "reference" / "setup.sh"


# ---------------------------------------------------------------- llama.cpp child (venv python)


def bench_prompt(n_tokens, n_vocab):
    """The synthetic prompt `ramforge-tools bench` uses (speed does not depend on the ids)."""
    return [(i * 7919 + 13) % n_vocab for i in range(n_tokens)]


def proc_status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def proc_read_bytes():
    """Bytes this process made the block layer read (page faults on mmap included)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def child_llama(args):
    """Load with llama-cpp-python, prefill P ids in one batch, decode N greedy tokens."""
    import ctypes

    import numpy as np
    import llama_cpp
    from llama_cpp import llama_cpp as C

    if args.no_extra_bufts:
        # 0.3.36's Llama() has no kwarg for it: patch the default model params it starts from.
        default_params = C.llama_model_default_params

        def params_without_repack():
            p = default_params()
            p.use_extra_bufts = False
            return p

        C.llama_model_default_params = params_without_repack

    started = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=args.child_llama,
        n_ctx=args.prompt_tokens + args.gen_tokens,
        n_batch=max(args.prompt_tokens, 1),
        n_ubatch=max(args.prompt_tokens, 1),
        n_threads=args.threads,
        n_threads_batch=args.threads,
        use_mmap=not args.no_mmap,
        verbose=False,
    )
    load_secs = time.perf_counter() - started
    n_vocab = llm.n_vocab()
    ctx = llm._ctx.ctx

    def last_argmax():
        ptr = C.llama_get_logits_ith(ctx, -1)
        logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
        return int(logits.argmax())

    prompt = bench_prompt(args.prompt_tokens, n_vocab)
    t0 = time.perf_counter()
    llm.eval(prompt)
    nxt = last_argmax()
    prefill_secs = time.perf_counter() - t0

    read0 = proc_read_bytes()
    t0 = time.perf_counter()
    for _ in range(args.gen_tokens):
        llm.eval([nxt])
        nxt = last_argmax()
    decode_secs = time.perf_counter() - t0
    decode_read = proc_read_bytes() - read0

    out = {
        "engine": "llama.cpp",
        "version": getattr(llama_cpp, "__version__", "?"),
        "model": args.child_llama,
        "model_bytes": os.path.getsize(args.child_llama),
        "threads": args.threads,
        "use_mmap": not args.no_mmap,
        "use_extra_bufts": not args.no_extra_bufts,
        "load_secs": load_secs,
        "prompt_tokens": args.prompt_tokens,
        "prefill_secs": prefill_secs,
        "prefill_tokens_per_sec": args.prompt_tokens / prefill_secs if prefill_secs > 0 else 0.0,
        "gen_tokens": args.gen_tokens,
        "decode_secs": decode_secs,
        "decode_tokens_per_sec": args.gen_tokens / decode_secs if decode_secs > 0 else 0.0,
        "decode_read_bytes": decode_read,
        "bytes_read_per_token": decode_read / args.gen_tokens if args.gen_tokens else 0.0,
        "total_read_bytes": proc_read_bytes(),
        "peak_rss_bytes": proc_status_kib("VmHWM") * 1024,
    }
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------- driver (any python3)


def reference_python(explicit):
    """The reference venv's python: --python, $RAMFORGE_REFERENCE_PY, or setup.sh's venv."""
    if explicit:
        return explicit
    env = os.environ.get("RAMFORGE_REFERENCE_PY")
    if env and os.access(env, os.X_OK):
        return env
    if not REFERENCE_SETUP.exists():
        sys.exit(f"error: {REFERENCE_SETUP} not found; pass --python PATH to a python with llama_cpp 0.3.36")
    venv = ROOT / ".venv-reference"
    out = subprocess.run(["bash", str(REFERENCE_SETUP), str(venv)], check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


def ramforge_binary(explicit, build):
    """`ramforge-tools` from --ramforge, or a release build in $CARGO_TARGET_DIR (default target/)."""
    if explicit:
        return explicit
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "ramforge-tools"], cwd=ROOT, check=True)
    binary = target / "release" / "ramforge-tools"
    if not binary.exists():
        sys.exit(f"error: {binary} not found (build it, or pass --ramforge PATH)")
    return str(binary)


def cpu_name():
    """The CPU, to print beside every figure: its model name, family and model numbers, and the
    vector extensions the kernels choose between (/proc/cpuinfo)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return "unknown CPU"
    flags = set(fields.get("flags", "").split())
    isa = [f for f in ("avx2", "avx_vnni", "avx512f", "avx512_vnni") if f in flags] or ["no AVX2"]
    return (f"{fields.get('model name', 'unknown CPU')}, family {fields.get('cpu family', '?')}"
            f" model {fields.get('model', '?')}, {' '.join(isa)}")


def memory_bandwidth(rf_bin, threads, build):
    """Read bandwidth in GB/s with `threads` threads: `membw` (benches/src/bin/membw.rs, beside
    the ramforge-tools binary), 512 MiB, best of 5 passes; None if it is not there."""
    if build:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "ramforge-benches", "--bin", "membw"],
                       cwd=ROOT, check=True)
    membw = Path(rf_bin).parent / "membw"
    if not membw.exists():
        print(f"note: {membw} not found (cargo build --release -p ramforge-benches --bin membw): "
              "no roofline column", file=sys.stderr)
        return None
    out = subprocess.run([str(membw), "512", str(threads), "5", "--json"], check=True, stdout=subprocess.PIPE,
                         text=True)
    return json.loads(out.stdout)["read_gb_per_sec"]


def weight_bytes_per_token(rf_bin, model):
    """Weight bytes one decoded token reads: every layer's matrices, the output projection and one
    embedding row (`ramforge-tools plan --json`, all resident)."""
    out = subprocess.run([rf_bin, "--quiet", "plan", "--json", "--ram", "1T", model], check=True,
                         stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout)["weight_bytes_per_token"]


def wait4_child(cmd, env=None, preexec_fn=None, timeout=None):
    """Run one child to completion; return (returncode, stdout, stderr, ru_maxrss bytes, wall secs)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=preexec_fn)
    # Read the pipes on threads so that wait4 can reap the child itself (and so get its rusage).
    import threading

    chunks = {"out": b"", "err": b""}

    def drain(stream, key):
        chunks[key] = stream.read()

    threads = [threading.Thread(target=drain, args=(proc.stdout, "out")),
               threading.Thread(target=drain, args=(proc.stderr, "err"))]
    for t in threads:
        t.start()
    deadline = None if timeout is None else started + timeout
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline is not None and time.perf_counter() > deadline:
            proc.kill()
            deadline = None
        time.sleep(0.02)
    for t in threads:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (proc.returncode, chunks["out"].decode(errors="replace"), chunks["err"].decode(errors="replace"),
            rusage.ru_maxrss * 1024, time.perf_counter() - started)


def last_json(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def one_run(cmd, what):
    rc, out, err, maxrss, _ = wait4_child(cmd)
    result = last_json(out)
    if rc != 0 or result is None:
        raise SystemExit(f"error: {what} exited {rc}: {err.strip().splitlines()[-1] if err.strip() else out[-200:]}")
    result["child_maxrss_bytes"] = maxrss
    return result


def summarize(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def child_cmds(model, args, rf_bin, ref_py, prompt_tokens, gen_tokens):
    """(ramforge cmd, llama.cpp cmd) for one prompt length and decode length."""
    me = str(Path(__file__).resolve())
    rf_cmd = [rf_bin, "--quiet", "bench", "-m", model, "-p", str(prompt_tokens), "-n", str(gen_tokens),
              "-t", str(args.threads), "--json"]
    ll_cmd = [ref_py, me, "--child-llama", model, "--threads", str(args.threads),
              "--prompt-tokens", str(prompt_tokens), "--gen-tokens", str(gen_tokens)]
    return rf_cmd, ll_cmd


def bench_model(model, args, rf_bin, ref_py):
    rf_cmd, ll_cmd = child_cmds(model, args, rf_bin, ref_py, args.prompt_tokens, args.gen_tokens)
    for _ in range(args.warmup):
        one_run(rf_cmd, "ramforge-tools bench")
        one_run(ll_cmd, "llama.cpp child")
    runs = {"ramforge": [], "llama.cpp": []}
    for i in range(args.runs):
        # Alternate which engine goes first so drift on a busy machine hits both alike.
        order = [("ramforge", rf_cmd), ("llama.cpp", ll_cmd)]
        if i % 2:
            order.reverse()
        for name, cmd in order:
            runs[name].append(one_run(cmd, name))
        if not args.json:
            print(f"  run {i + 1}/{args.runs}: ramforge decode {runs['ramforge'][-1]['decode_tokens_per_sec']:.1f}"
                  f" tok/s, llama.cpp decode {runs['llama.cpp'][-1]['decode_tokens_per_sec']:.1f} tok/s",
                  file=sys.stderr)
    row = {"model": model, "model_bytes": os.path.getsize(model), "threads": args.threads,
           "prompt_tokens": args.prompt_tokens, "gen_tokens": args.gen_tokens, "runs": args.runs}
    for name, rs in runs.items():
        row[name] = {
            "prefill_tokens_per_sec": summarize([r["prefill_tokens_per_sec"] for r in rs]),
            "decode_tokens_per_sec": summarize([r["decode_tokens_per_sec"] for r in rs]),
            "peak_rss_bytes": max(r["child_maxrss_bytes"] for r in rs),
        }
    ours, ref = row["ramforge"], row["llama.cpp"]
    row["prefill_ratio"] = ours["prefill_tokens_per_sec"]["median"] / ref["prefill_tokens_per_sec"]["median"]
    row["decode_ratio"] = ours["decode_tokens_per_sec"]["median"] / ref["decode_tokens_per_sec"]["median"]
    return row


def table_model(model, args, rf_bin, ref_py):
    """`--table`: prefill at each --prefill length, decode at each --depths depth."""
    prefills = parse_lengths(args.prefill)
    depths = parse_lengths(args.depths)
    # Prompt length -> decoded tokens; a depth-D column decodes after a max(D, 1)-token prompt.
    plan = {}
    for p in prefills:
        plan[p] = 1
    for d in depths:
        plan[max(d, 1)] = args.gen_tokens
    cmds = {p: child_cmds(model, args, rf_bin, ref_py, p, n) for p, n in sorted(plan.items())}
    for _ in range(args.warmup):
        for rf_cmd, ll_cmd in cmds.values():
            one_run(rf_cmd, "ramforge-tools bench")
            one_run(ll_cmd, "llama.cpp child")
    runs = {(name, p): [] for name in ("ramforge", "llama.cpp") for p in cmds}
    for i in range(args.runs):
        for p, (rf_cmd, ll_cmd) in cmds.items():
            order = [("ramforge", rf_cmd), ("llama.cpp", ll_cmd)]
            if i % 2:
                order.reverse()
            for name, cmd in order:
                runs[(name, p)].append(one_run(cmd, name))
            if not args.json:
                o, l = runs[("ramforge", p)][-1], runs[("llama.cpp", p)][-1]
                print(f"  run {i + 1}/{args.runs} p={p}: prefill {o['prefill_tokens_per_sec']:.1f} /"
                      f" {l['prefill_tokens_per_sec']:.1f}, decode {o['decode_tokens_per_sec']:.1f} /"
                      f" {l['decode_tokens_per_sec']:.1f} tok/s (ours / llama.cpp)", file=sys.stderr)
    row = {"model": model, "model_bytes": os.path.getsize(model), "threads": args.threads, "runs": args.runs,
           "warmup": args.warmup, "gen_tokens": args.gen_tokens, "columns": []}
    for kind, lengths, key in (("prefill", prefills, "prefill_tokens_per_sec"),
                               ("decode", depths, "decode_tokens_per_sec")):
        for n in lengths:
            p = n if kind == "prefill" else max(n, 1)
            col = {"kind": kind, "tokens": n, "prompt_tokens": p}
            for name in ("ramforge", "llama.cpp"):
                col[name] = summarize([r[key] for r in runs[(name, p)]])
            col["ratio"] = col["ramforge"]["median"] / col["llama.cpp"]["median"]
            row["columns"].append(col)
    for name in ("ramforge", "llama.cpp"):
        row[name] = {"peak_rss_bytes": max(r["child_maxrss_bytes"] for p in cmds for r in runs[(name, p)])}
    if args.membw_gb_per_sec:
        # Roofline: the weight bytes a decoded token reads at the measured tok/s, as a share of the
        # memory read bandwidth (KV reads at depth not counted).
        row["weight_bytes_per_token"] = weight_bytes_per_token(rf_bin, model)
        for col in row["columns"]:
            if col["kind"] == "decode":
                for name in ("ramforge", "llama.cpp"):
                    gbps = col[name]["median"] * row["weight_bytes_per_token"] / 1e9
                    col[name]["roofline"] = gbps / args.membw_gb_per_sec
    return row


def parse_lengths(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        sys.exit(f"error: {text!r}: expected comma-separated token counts")
    if not values or any(v < 0 for v in values):
        sys.exit(f"error: {text!r}: expected comma-separated token counts >= 0")
    return values


def format_name(model):
    """A SmolLM2 file's format (smollm2-Q6_K.gguf -> Q6_K); other files keep their stem."""
    stem = Path(model).name.removesuffix(".gguf")
    for prefix in ("smollm2-", "SmolLM2-135M-Instruct."):
        if stem.startswith(prefix):
            return stem[len(prefix):]
    return stem


def print_wide_table(rows):
    if not rows:
        return
    cols = rows[0]["columns"]
    roof = "roofline" in next((c["ramforge"] for c in cols if c["kind"] == "decode"), {})

    def head_cell(c):
        h = f"{c['kind']} {c['tokens']}" if c["kind"] == "prefill" else f"decode @{c['tokens']}"
        extra = f" {'roof':>9}" if roof and c["kind"] == "decode" else ""
        return f"{h:>12} {'llama.cpp':>9} {'ratio':>6}{extra}"

    def cell(c):
        text = f"{c['ramforge']['median']:>12.1f} {c['llama.cpp']['median']:>9.1f} {c['ratio']:>5.2f}x"
        if roof and c["kind"] == "decode":
            both = f"{100 * c['ramforge']['roofline']:.0f}%/{100 * c['llama.cpp']['roofline']:.0f}%"
            text += f" {both:>9}"
        return text

    head = f"{'format':<20} | " + " | ".join(head_cell(c) for c in cols)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{format_name(r['model'])[:20]:<20} | " + " | ".join(cell(c) for c in r["columns"]))
    r = rows[0]
    print(f"(tok/s, RAMforge then llama.cpp, medians of {r['runs']} alternating runs after {r.get('warmup', 1)} warm-up, "
          f"{r['threads']} threads; decode @D = {r['gen_tokens']} greedy tokens after a D-token prompt"
          f" (@0: 1 token); ratio = ours / llama.cpp)")
    if roof:
        print(f"(roof = decode tok/s x weight bytes per token / membw's {rows[0]['membw_gb_per_sec']:.1f} GB/s"
              f" ({r['threads']} threads), ours/llama.cpp; KV reads at depth not counted)")
    print(f"(CPU: {cpu_name()})")


def mib(n):
    return f"{n / 1048576:.1f} MiB"


def print_table(rows):
    head = (f"{'model':<36} {'thr':>3} | {'prefill tok/s ours':>18} {'llama.cpp':>10} {'ratio':>6} | "
            f"{'decode tok/s ours':>17} {'llama.cpp':>10} {'ratio':>6} | {'peak RSS ours':>13} {'llama.cpp':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        o, l = r["ramforge"], r["llama.cpp"]
        print(f"{Path(r['model']).name[:36]:<36} {r['threads']:>3} | "
              f"{o['prefill_tokens_per_sec']['median']:>18.1f} {l['prefill_tokens_per_sec']['median']:>10.1f} "
              f"{r['prefill_ratio']:>5.2f}x | "
              f"{o['decode_tokens_per_sec']['median']:>17.1f} {l['decode_tokens_per_sec']['median']:>10.1f} "
              f"{r['decode_ratio']:>5.2f}x | {mib(o['peak_rss_bytes']):>13} {mib(l['peak_rss_bytes']):>11}")
    if rows:
        r = rows[0]
        print(f"(medians of {r['runs']} runs after warm-up; prefill = {r['prompt_tokens']}-token prompt in one batch,"
              f" decode = {r['gen_tokens']} greedy tokens; ratio = ours / llama.cpp)")
        print(f"(CPU: {cpu_name()})")


def default_models():
    models = Path(os.environ.get("RAMFORGE_MODELS", ROOT / "models"))
    return [str(models / "SmolLM2-135M-Instruct.Q4_1.gguf")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", metavar="MODEL.gguf",
                   help="GGUF files (default: $RAMFORGE_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf)")
    p.add_argument("-t", "--threads", type=int, default=2, help="threads for both engines (default 2)")
    p.add_argument("-r", "--runs", type=int, default=5, help="measured runs per engine (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="discarded warm-up runs per engine (default 1)")
    p.add_argument("-p", "--prompt-tokens", type=int, default=128, help="prefill prompt length (default 128)")
    p.add_argument("-n", "--gen-tokens", type=int, default=64, help="decoded tokens (default 64)")
    p.add_argument("--table", action="store_true",
                   help="one row per model: prefill at each --prefill length, decode at each --depths depth")
    p.add_argument("--prefill", default="500,2000", metavar="N,N", help="--table prefill lengths (default 500,2000)")
    p.add_argument("--depths", default="0,2000", metavar="D,D", help="--table decode depths (default 0,2000)")
    p.add_argument("--ramforge", metavar="PATH", help="ramforge-tools binary (default: release build)")
    p.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    p.add_argument("--python", metavar="PATH", help="python with llama_cpp 0.3.36 (default: reference venv)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    # The llama.cpp child mode (runs inside the reference venv).
    p.add_argument("--child-llama", metavar="MODEL", help=argparse.SUPPRESS)
    p.add_argument("--no-extra-bufts", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-mmap", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child_llama:
        child_llama(args)
        return
    if args.runs < 1 or args.prompt_tokens < 1 or args.gen_tokens < 1 or args.threads < 1:
        p.error("--runs, --prompt-tokens, --gen-tokens and --threads must be >= 1")
    models = args.models or default_models()
    for m in models:
        if not os.path.isfile(m):
            sys.exit(f"error: model {m} not found (scripts/test.sh fetches the models into models/)")
    rf_bin = ramforge_binary(args.ramforge, not args.no_build)
    ref_py = reference_python(args.python)
    args.membw_gb_per_sec = memory_bandwidth(rf_bin, args.threads, not args.no_build) if args.table else None
    rows = []
    for m in models:
        if not args.json:
            print(f"{Path(m).name}: {args.warmup} warm-up + {args.runs} runs per engine, {args.threads} threads",
                  file=sys.stderr)
        rows.append((table_model if args.table else bench_model)(m, args, rf_bin, ref_py))
        rows[-1]["membw_gb_per_sec"] = args.membw_gb_per_sec
    if args.json:
        machine = {"cpus": os.cpu_count(), "cpu": cpu_name(), "membw_gb_per_sec": args.membw_gb_per_sec}
        print(json.dumps({"machine": machine, "results": rows}, indent=1))
    elif args.table:
        print_wide_table(rows)
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
