"""Headless Chromium driven over the DevTools protocol on a pipe, with an execution detector.

Chromium runs with ``--remote-debugging-pipe`` (commands on fd 3, replies on fd 4), so no
extra package is needed. Before any page script runs, a hook replaces ``alert``,
``confirm``, ``prompt`` and ``print`` with a call to a DevTools binding; dialogs that still
open are counted too. Every request that is not for the inspector itself is failed inside
the browser (and a dead proxy catches any that escaped), so a payload that did execute could
not reach another host.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "Browser", "PageResult"]

CHROMIUM = Path("/usr/bin/chromium")
BINDING = "__zincirExecuted"

HOOK = f"""(() => {{
  const hit = (how, detail) => {{
    try {{ {BINDING}(JSON.stringify({{how, detail: String(detail).slice(0, 200)}})); }}
    catch (error) {{}}
  }};
  for (const name of ["alert", "confirm", "prompt", "print"]) {{
    try {{
      Object.defineProperty(window, name, {{value: (m) => hit(name, m), configurable: false}});
    }} catch (error) {{}}
  }}
}})();"""

AUDIT = """(() => {
  const urls = ["href", "src", "action", "formaction", "data", "xlink:href", "background",
                "poster", "dynsrc", "lowsrc", "codebase"];
  const foreign = new Set(["iframe", "frame", "frameset", "object", "embed", "applet", "base",
                           "svg", "math", "style", "img", "image", "video", "audio", "bgsound",
                           "marquee", "xss", "layer", "ilayer", "xml", "body", "textarea"]);
  const found = [];
  let bodies = 0;
  for (const el of document.querySelectorAll("*")) {
    const tag = el.tagName.toLowerCase();
    if (tag === "body") { bodies += 1; if (bodies === 1) continue; }
    if (foreign.has(tag)) found.push("<" + tag + ">");
    if (tag === "meta" && el.hasAttribute("http-equiv")) found.push("<meta http-equiv>");
    if (tag === "script" && !(el.getAttribute("src") || "").startsWith("/static/"))
      found.push("<script> not from /static/");
    if (tag === "link" && (el.getAttribute("rel") || "").toLowerCase() !== "stylesheet")
      found.push("<link rel=" + el.getAttribute("rel") + ">");
    for (const attribute of el.attributes) {
      const name = attribute.name.toLowerCase();
      const value = attribute.value.replace(/[\\s\\u0000-\\u001f]/g, "").toLowerCase();
      if (name.startsWith("on")) found.push(tag + " " + name);
      if (name === "srcdoc") found.push(tag + " srcdoc");
      if (urls.includes(name) && /^(javascript|vbscript|livescript|data):/.test(value))
        found.push(tag + " " + name + "=" + value.slice(0, 40));
      if (name === "style" && /expression|javascript:|url\\(/.test(value))
        found.push(tag + " style=" + value.slice(0, 40));
    }
  }
  const converted = document.querySelectorAll('time[title*="(shown in "]').length;
  const text = document.documentElement.textContent.replace(/\\s+/g, " ");
  return JSON.stringify({found, ownScriptRan: converted > 0,
                         showsPayloadText: text.includes(PROBE)});
})()"""


@dataclass
class PageResult:
    """What one page load did: executions seen, payload elements live in its DOM."""

    url: str
    executed: list[str] = field(default_factory=list)
    live_elements: list[str] = field(default_factory=list)
    own_script_ran: bool = False
    shows_payload_text: bool = False
    blocked_requests: int = 0


class Browser:
    """One headless Chromium and one tab, driven synchronously over the DevTools pipe."""

    def __init__(self, profile: Path, allowed_prefix: str) -> None:
        self.allowed_prefix = allowed_prefix
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def child_fds() -> None:  # Chromium expects the pipe on fds 3 and 4, and no others
            high_read, high_write = os.dup(commands_read) + 100, os.dup(replies_write) + 100
            os.dup2(commands_read, high_read)
            os.dup2(replies_write, high_write)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)
            os.closerange(5, os.sysconf("SC_OPEN_MAX"))

        self.process = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--proxy-server=http://127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=child_fds,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0
        self.session = ""
        self._open_tab()

    # -- the protocol -----------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._replies, "rb", buffering=0) as replies:
            while chunk := replies.read(1 << 16):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._inbox.put(json.loads(message))
        self._inbox.put(None)

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30
    ) -> Any:
        """Send one command (to the tab once it is attached) and wait for its reply."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == message["id"], timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _wait(self, wanted: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            try:
                message = self._inbox.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                raise RuntimeError("Chromium exited")
            if wanted(message):
                return message
            self._event(message)

    # -- events ---------------------------------------------------------------------------

    _page: PageResult | None = None

    def _event(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params", {})
        page = self._page
        if method == "Runtime.bindingCalled" and params.get("name") == BINDING:
            if page is not None:
                page.executed.append(str(params.get("payload"))[:300])
        elif method == "Page.javascriptDialogOpening":
            if page is not None:
                page.executed.append(f"dialog {params.get('type')}: {params.get('message')}"[:300])
            self._post("Page.handleJavaScriptDialog", {"accept": False})
        elif method == "Fetch.requestPaused":
            url = str(params["request"]["url"])
            if url.startswith(self.allowed_prefix):
                self._post("Fetch.continueRequest", {"requestId": params["requestId"]})
            else:
                if page is not None:
                    page.blocked_requests += 1
                reason = {"requestId": params["requestId"], "errorReason": "BlockedByClient"}
                self._post("Fetch.failRequest", reason)

    def _post(self, method: str, params: dict[str, Any]) -> None:
        """Send a command whose reply nobody waits for (it is dropped as an event)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")

    # -- the tab --------------------------------------------------------------------------

    def _open_tab(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Runtime.addBinding", {"name": BINDING})
        self.send("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
        self.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})

    def render(
        self, url: str, *, bypass_csp: bool, settle: float = 0.15, probe: str = ""
    ) -> PageResult:
        """Load ``url``, let its timers run for ``settle`` seconds, then audit its DOM (and
        whether its text shows ``probe``)."""
        page = PageResult(url)
        self._page = page
        self.send("Page.setBypassCSP", {"enabled": bypass_csp})
        self.send("Page.navigate", {"url": url})
        self._wait(lambda m: m.get("method") == "Page.loadEventFired", 30)
        deadline = time.monotonic() + settle
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self._inbox.get(timeout=left)
            except queue.Empty:
                break
            if message is None:
                raise RuntimeError("Chromium exited")
            self._event(message)
        expression = AUDIT.replace("PROBE", json.dumps(probe))
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        audit = json.loads(result["result"]["value"])
        page.live_elements = list(audit["found"])
        page.own_script_ran = bool(audit["ownScriptRan"])
        page.shows_payload_text = bool(audit["showsPayloadText"])
        self._page = None
        return page

    def close(self) -> None:
        """Ask Chromium to quit, then make sure it did."""
        try:
            self.session = ""
            self._post("Browser.close", {})
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
