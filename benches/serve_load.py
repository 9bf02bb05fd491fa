#!/usr/bin/env python3
"""Load on `ramforge-tools serve` over loopback (issue 17): N requests from C clients, some of
which hang up mid-answer, against a server under a RAM budget.

Starts the server itself (`serve MODEL --port 0 --ram RAM --ctx CTX --queue Q --parallel P`), then C client
threads send N requests between them (seeded mix of chat / completions, plain / streamed,
max_tokens 8..48); about a quarter hang up after the first bytes (streamed) or while waiting
(plain), and a few are deliberately bad (n=2, expected 400). It checks that every request that
was not abandoned got its intended answer (200 with a whole body or a stream ending in
[DONE], or the intended 400), that the server is still healthy, that its peak RSS (VmHWM) stayed
within RAM + 16 MiB, and that SIGTERM exits it with 0. Prints a summary; exits 1 on any failure.

usage: benches/serve_load.py [--ramforge BIN] [--model M.gguf] [--requests 64] [--clients 16]
                             [--ram 48M] [--ctx 1024] [--threads 2] [--seed 1] [--parallel 1]
(--parallel 4 books four contexts of KV: with --ram 48M give it --ctx 256.)
Default BIN: $CARGO_TARGET_DIR/release/ramforge-tools if built, else .../debug/ramforge-tools.
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLACK = 16 << 20  # the HTTP side's allowance over the budget


def default_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("release", "debug"):
        p = target / profile / "ramforge-tools"
        if p.is_file():
            return str(p)
    sys.exit("no ramforge-tools binary: build it (cargo build --release -p ramforge-tools) or pass --ramforge")


def mib(text):
    m = re.fullmatch(r"(\d+)M", text)
    if not m:
        sys.exit(f"--ram {text}: give it as NM (MiB)")
    return int(m.group(1)) << 20


def status_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def start_server(args):
    cmd = [args.ramforge, "serve", args.model, "--port", "0", "--ram", args.ram, "--ctx", str(args.ctx),
           "--threads", str(args.threads), "--queue", str(args.clients * 2), "--parallel", str(args.parallel)]
    return launch(cmd)


def launch(cmd, hint=""):
    """Start `serve` with `cmd` (its --port 0) and wait for its address line: (process, port)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://(127\.0\.0\.1):(\d+)", line)
        if m:
            threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
            return proc, int(m.group(2))
    proc.kill()
    sys.exit("the server printed no address line" + hint)


def body_for(rng, model, i):
    chat = rng.random() < 0.5
    body = {"model": model, "max_tokens": rng.randint(8, 48), "temperature": rng.choice([0, 0.8]), "seed": i}
    if chat:
        body["messages"] = [{"role": "user", "content": f"Tell me a fact about the number {i}."}]
    else:
        body["prompt"] = f"Fact {i}: the number {i} is"
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


def plan(rng, model, n):
    """The requests: (path, body, kind) with kind 'ok', 'hangup' or 'bad'."""
    out = []
    for i in range(n):
        path, body = body_for(rng, model, i)
        r = rng.random()
        kind = "bad" if r < 0.06 else "hangup" if r < 0.3 else "ok"
        if kind == "bad":
            body["n"] = 2
        if kind == "hangup":
            body["max_tokens"] = 400
        body["stream"] = rng.random() < 0.5
        out.append((path, body, kind))
    return out


def send(port, path, body, kind):
    """One request; the outcome as a short string ('ok', 'hung up', or what went wrong)."""
    data = json.dumps(body).encode()
    if kind == "hangup":
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        if body["stream"]:
            s.recv(64)  # the first bytes of the stream, then gone
        else:
            time.sleep(random.uniform(0.05, 0.5))
        s.close()
        return "hung up"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    r = conn.getresponse()
    raw = r.read().decode()
    conn.close()
    if kind == "bad":
        ok = r.status == 400 and json.loads(raw)["error"]["param"] == "n"
        return "ok" if ok else f"expected 400 for n=2, got {r.status} {raw[:200]}"
    if r.status != 200:
        return f"status {r.status}: {raw[:200]}"
    if body["stream"]:
        data_lines = [l[6:] for l in raw.splitlines() if l.startswith("data: ")]
        if not data_lines or data_lines[-1] != "[DONE]":
            return f"stream without [DONE]: {raw[-200:]}"
        finishes = [c["finish_reason"] for d in data_lines[:-1] for c in json.loads(d)["choices"] if c["finish_reason"]]
        return "ok" if finishes in (["stop"], ["length"]) else f"stream finish_reason {finishes}"
    answer = json.loads(raw)
    if answer["choices"][0]["finish_reason"] not in ("stop", "length"):
        return f"finish_reason {answer['choices'][0]['finish_reason']}"
    return "ok" if answer["usage"]["completion_tokens"] <= body["max_tokens"] else "too many tokens"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ramforge", default=None)
    ap.add_argument("--model", default=str(Path(os.environ.get("RAMFORGE_MODELS", ROOT / "models")) / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--ram", default="48M")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=1)
    args = ap.parse_args()
    args.ramforge = args.ramforge or default_binary()
    budget = mib(args.ram)

    proc, port = start_server(args)
    model = Path(args.model).stem
    requests = plan(random.Random(args.seed), model, args.requests)
    outcomes = [None] * len(requests)
    next_index = iter(range(len(requests)))
    lock = threading.Lock()
    rss_samples = []

    def client():
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                outcomes[i] = send(port, *requests[i])
            except Exception as e:  # noqa: BLE001 (any failure is reported)
                outcomes[i] = f"{type(e).__name__}: {e}"

    started = time.time()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rss_samples.append(status_kib(proc.pid, "VmRSS"))
        time.sleep(0.2)
    secs = time.time() - started

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/health")
    healthy = conn.getresponse().status == 200
    conn.close()
    after = send(port, "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4, "stream": False}, "ok")
    peak = status_kib(proc.pid, "VmHWM") << 10
    proc.send_signal(signal.SIGTERM)
    exit_code = proc.wait(timeout=120)

    kinds = {k: sum(1 for _, _, kind in requests if kind == k) for k in ("ok", "hangup", "bad")}
    failures = [(i, o) for i, o in enumerate(outcomes) if o not in ("ok", "hung up")]
    print(f"serve_load: {len(requests)} requests from {args.clients} clients in {secs:.1f} s "
          f"({kinds['ok']} to answer, {kinds['hangup']} hang-ups, {kinds['bad']} deliberately bad)")
    print(f"  answered as intended: {sum(o == 'ok' for o in outcomes)}, hung up: {sum(o == 'hung up' for o in outcomes)}, "
          f"failed: {len(failures)}")
    for i, o in failures:
        print(f"  request {i} {requests[i][0]}: {o}")
    print(f"  after the load: /health {'ok' if healthy else 'FAILED'}, a new request {after}")
    print(f"  peak RSS {peak / 2**20:.1f} MiB (budget {budget >> 20} MiB + {SLACK >> 20} MiB allowed); "
          f"RSS during the load {min(rss_samples) / 1024:.1f}..{max(rss_samples) / 1024:.1f} MiB")
    print(f"  SIGTERM: exit {exit_code}")
    ok = not failures and healthy and after == "ok" and peak <= budget + SLACK and exit_code == 0
    print("serve_load: " + ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
