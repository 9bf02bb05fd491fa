#!/usr/bin/env python3
"""Batched decoding on `ramforge-tools serve --parallel` over loopback (issue 17): the aggregate
decode speed of C concurrent clients against one client, on one server under a RAM budget that
streams layers.

Starts the server itself (`serve MODEL --port 0 --ram RAM --ctx CTX --parallel C`), RAM a
fraction of the model file (default 40%). Then alternates rounds: one client sending C
streamed completions one after another, and C clients each sending one at the same time
(different counting prompts that do not stop early, greedy, max_tokens N). A round's
aggregate decode speed is the tokens after each answer's first, summed, over the time from the
first answer's first token to the last answer's end (prompt prefill excluded as far as it
precedes decoding). Prints every round, the medians and their ratio, /health's busiest step and
the server's peak RSS (VmHWM) against the budget + 16 MiB; exits 1 if the ratio is under
--want or the RSS bound fails. Bounded: --rounds of each kind (default 3), every request
bounded by max_tokens and a 300 s timeout.

usage: benches/serve_batch.py [--ramforge BIN] [--model M.gguf] [--fraction 0.4] [--ctx 256]
                              [--clients 4] [--tokens 64] [--rounds 3] [--threads 2] [--want 2.5]
                              [--cold] [--read-bps BPS]
With --read-bps the server runs under ../shared/bench/limits.sh: a memory cgroup of the budget + 24 MiB
(RSS and page cache together, so the streamed layers come from storage on every step) and reads from
the model's device capped at BPS bytes/s, which makes storage the limit exactly: the case batching
is for, where one pass over the streamed layers serves every active request.
With --cold the model file is evicted from the page cache (posix_fadvise DONTNEED) before the
server starts and before every round, so the
server streams its layers from storage (O_DIRECT, or buffered reads it drops again) as a budget that
the page cache cannot exceed would; without it a warm page cache lets the server use the streamed
layers in place (mapped), and a step costs little more than its arithmetic.
Default BIN: $CARGO_TARGET_DIR/release/ramforge-tools if built, else .../debug/ramforge-tools.
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import ROOT, SLACK, default_binary, launch, status_kib  # noqa: E402  (shared with the load script)


LIMITS = ROOT.parent / "shared" / "bench" / "limits.sh"
CGROUP_SLACK = 24 << 20  # the cgroup's memory over the budget (as moe_streaming.py gives it)


def start_server(args, ram_mib):
    """(process to wait for, pid of the server itself, port)."""
    cmd = [args.ramforge, "serve", args.model, "--port", "0", "--ram", f"{ram_mib}M", "--ctx", str(args.ctx),
           "--threads", str(args.threads), "--parallel", str(args.clients), "--queue", str(args.clients * 2)]
    if args.read_bps:
        cmd = ["bash", str(LIMITS), "--mem", str((ram_mib << 20) + CGROUP_SLACK), "--read-bps", str(args.read_bps),
               "--file", args.model, "--"] + cmd
    proc, port = launch(cmd, " (is the budget too small for --parallel x --ctx?)")
    return proc, server_pid(proc) if args.read_bps else proc.pid, port


def server_pid(proc):
    """The server under limits.sh: the child its subshell became with exec."""
    for _ in range(100):
        children = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
        for c in children:
            if os.path.realpath(f"/proc/{c}/exe").endswith("ramforge-tools"):
                return int(c)
        time.sleep(0.05)
    sys.exit("no ramforge-tools process under limits.sh")


def stream(port, model, prompt, tokens):
    """One streamed greedy completion: (time of its first text, time of its end, completion tokens)."""
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, r.status
    first, used = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            used = chunk["usage"]["completion_tokens"]
        elif first is None:
            first = time.time()
    end = time.time()
    conn.close()
    return first or end, end, used or 0


def evict(path):
    """Drops the file's pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def prompt(i):
    return ", ".join(str(i * 10 + k) for k in range(1, 5)) + ","


def decode_rate(results):
    start = min(f for f, _, _ in results)
    end = max(e for _, e, _ in results)
    tokens = sum(max(n - 1, 0) for _, _, n in results)
    return tokens / (end - start), tokens


def one_client(port, args):
    return decode_rate([stream(port, args.model_id, prompt(i), args.tokens) for i in range(args.clients)])


def many_clients(port, args):
    results = [None] * args.clients

    def client(i):
        results[i] = stream(port, args.model_id, prompt(i), args.tokens)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return decode_rate(results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ramforge", default=None)
    ap.add_argument("--model", default=str(Path(os.environ.get("RAMFORGE_MODELS", ROOT / "models"))
                                           / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--fraction", type=float, default=0.4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--want", type=float, default=2.5)
    ap.add_argument("--cold", action="store_true", help="evict the model file from the page cache first")
    ap.add_argument("--read-bps", type=int, default=0,
                    help="run the server under limits.sh: memory = budget + 24 MiB, reads capped at this rate")
    args = ap.parse_args()
    args.ramforge = args.ramforge or default_binary()
    args.model_id = Path(args.model).stem
    ram_mib = int(os.path.getsize(args.model) * args.fraction) >> 20
    budget = ram_mib << 20
    if args.cold:
        evict(args.model)
    proc, pid, port = start_server(args, ram_mib)
    try:
        stream(port, args.model_id, prompt(99), 4)  # warm-up
        one, many = [], []
        for r in range(args.rounds):
            if args.cold:
                evict(args.model)
            rate, n = one_client(port, args)
            one.append(rate)
            print(f"round {r + 1}: 1 client   {rate:7.2f} tok/s ({n} tokens)", flush=True)
            if args.cold:
                evict(args.model)
            rate, n = many_clients(port, args)
            many.append(rate)
            print(f"round {r + 1}: {args.clients} clients {rate:7.2f} tok/s ({n} tokens)", flush=True)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/health")
        health = json.loads(conn.getresponse().read())
        conn.close()
        peak = status_kib(pid, "VmHWM") << 10
    finally:
        os.kill(pid, signal.SIGTERM)
        exit_code = proc.wait(timeout=120)
    m1, mc = statistics.median(one), statistics.median(many)
    ratio = mc / m1
    print(f"serve_batch: {os.path.basename(args.model)}, --ram {ram_mib}M ({args.fraction:.0%} of the file), "
          f"--ctx {args.ctx}, --parallel {args.clients}, --threads {args.threads}, {args.tokens} tokens per answer, "
          + (f"under limits.sh (memory budget + 24 MiB, reads {args.read_bps / 1e6:.0f} MB/s)" if args.read_bps
             else f"page cache {'cold' if args.cold else 'warm'}"))
    print(f"  median aggregate decode: 1 client {m1:.2f} tok/s, {args.clients} clients {mc:.2f} tok/s: {ratio:.2f}x "
          f"(want >= {args.want}x); busiest step {health.get('busiest_step')}")
    print(f"  peak RSS {peak / 2**20:.1f} MiB (budget {ram_mib} MiB + {SLACK >> 20} MiB allowed); SIGTERM: exit {exit_code}")
    ok = ratio >= args.want and peak <= budget + SLACK and exit_code == 0
    print("serve_batch: " + ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
