#!/usr/bin/env python3
"""Drives the chat page of `ramforge-tools serve` in headless Chromium, as a person would.

    page_check.py --url http://127.0.0.1:PORT/?temperature=0&max_tokens=24 --prompt TEXT \
                  --screenshot FILE.png

Opens the page, waits for the live panel's first reading, types TEXT into the message box and
clicks Send, waits for the streamed answer to finish, reads it from the page, takes a
screenshot, then opens the page again with ?q=TEXT (the auto-send parameter) and reads that
answer too. Prints one JSON object: {"answer", "answer_q", "error", "panel": {...}}.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: messages are
JSON ended by a NUL byte on file descriptors 3 and 4), so only the standard library is needed
and no port is opened. Everything is bounded by --timeout seconds.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse


class Browser:
    """A headless Chromium and its DevTools pipe."""

    def __init__(self, deadline: float):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            sys.exit("error: chromium not found (Debian: apt-get install chromium; scripts/test.sh installs it)")
        self.deadline = deadline
        self.profile = tempfile.mkdtemp(prefix="ramforge-page-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends on the descriptors Chromium expects
            # Moved out of the way first, in case either already is 3 or 4.
            reads, writes = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w))
            os.dup2(reads, 3)
            os.dup2(writes, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--disable-dev-shm-usage", "--window-size=1200,800",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, pass_fds=(3, 4),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b""
        self.next_id = 0

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        while True:  # events are skipped; only the answer to this call matters
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > self.deadline:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> str:
        """A new tab at `url`; returns its session id."""
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        return self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def eval(self, session: str, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, session: str, expression: str, what: str):
        """Polls `expression` until it is truthy; returns its value."""
        while time.monotonic() < self.deadline:
            value = self.eval(session, expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"timed out waiting for {what}")

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - closing is best effort; the process is killed below
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def answer_of(browser: Browser, session: str) -> dict:
    browser.wait_for(session, "document.body && document.body.dataset.state === 'done'", "the answer")
    return browser.eval(
        session,
        "(() => { const a = document.getElementById('answer');"
        " return {text: a.textContent, error: a.classList.contains('error')}; })()",
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    browser = Browser(time.monotonic() + args.timeout)
    try:
        tab = browser.open(args.url)
        browser.wait_for(tab, "document.getElementById('model') && "
                              "document.getElementById('model').textContent.includes('context')",
                         "the live panel's first reading")
        browser.eval(tab, f"document.getElementById('prompt').value = {json.dumps(args.prompt)};"
                          " document.getElementById('send').click(); true")
        typed = answer_of(browser, tab)
        # The panel refreshes after the answer and every second: wait for the passes to show.
        browser.wait_for(tab, "Number(document.getElementById('passes').textContent) > 0",
                         "the panel to show decoding passes")
        time.sleep(1.2)  # one more reading, so the bandwidth has two to compare
        panel = browser.eval(
            tab,
            "Object.fromEntries([...document.querySelectorAll('#panel .row')].map("
            "r => [r.children[0].textContent, r.children[1].textContent]))",
        )
        shot = browser.call("Page.captureScreenshot", {"format": "png"}, tab)
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        sep = "&" if urllib.parse.urlsplit(args.url).query else "?"
        auto = browser.open(args.url + sep + "q=" + urllib.parse.quote(args.prompt))
        by_query = answer_of(browser, auto)
    finally:
        browser.close()
    print(json.dumps({
        "answer": typed["text"],
        "answer_q": by_query["text"],
        "error": typed["error"] or by_query["error"],
        "panel": panel,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
