"""A CommandHandler program using only the standard library, as a worker in any language would.

It reads the invocation (one JSON object) from stdin until EOF and acts on ``mode`` in its
input document: ``echo``, ``exit``, ``sleep``, ``garbage``, ``empty``, ``two_docs``, ``huge``,
``not_utf8``, ``no_read``, ``signal``, ``record`` and the broken-record modes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

FIELDS = ["run_id", "step_id", "sequence", "kind", "handler_id", "input_json"]


def digest(document: str) -> str:
    return "sha256:" + hashlib.sha256(document.encode("utf-8")).hexdigest()


def record(invocation: dict[str, Any], outcome: dict[str, Any], **extra: Any) -> str:
    body = {
        "version": 1,
        "invocation": invocation,
        "input_digest": digest(invocation["input_json"]),
        "outcome": outcome,
        **extra,
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def main() -> int:
    if sys.argv[1:] == ["no_read"]:
        print('{"ok":true}')
        return 0
    invocation = json.loads(sys.stdin.read())
    assert isinstance(invocation, dict) and list(invocation) == FIELDS, invocation
    request = json.loads(invocation["input_json"])
    mode = request["mode"]
    out = sys.stdout
    if mode == "echo":
        out.write(
            json.dumps(
                {"received": invocation, "cwd": os.getcwd(), "env": os.environ.get("WORKER_LABEL")}
            )
            + "\n"
        )
    elif mode == "exit":
        out.write('{"looks": "fine"}\n')
        sys.stderr.write("x" * request.get("stderr_bytes", 0) + "\nsomething broke\n")
        return int(request.get("code", 3))
    elif mode == "sleep":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(request["pid_file"], "w") as pids:
            pids.write(f"{os.getpid()} {child.pid}")
        sys.stderr.write("going to sleep\n")
        sys.stderr.flush()
        time.sleep(60)
    elif mode == "garbage":
        out.write("this is not json {\n")
    elif mode == "empty":
        pass
    elif mode == "two_docs":
        out.write('{"a": 1} {"b": 2}\n')
    elif mode == "huge":
        out.write(json.dumps("y" * request["size"]))
    elif mode == "not_utf8":
        out.flush()
        sys.stdout.buffer.write(b'"\xff\xfe"')
    elif mode == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "record":
        out.write(record(invocation, request["outcome"]))
    elif mode == "record_other":
        other = {**invocation, "sequence": invocation["sequence"] + 1}
        out.write(record(other, {"success": {"output_json": "1"}}))
    elif mode == "record_drift":
        other = {**invocation, "input_json": '{"mode":"something else"}'}
        out.write(record(other, {"success": {"output_json": "1"}}))
    elif mode == "record_bad_digest":
        body = json.loads(record(invocation, {"success": {"output_json": "1"}}))
        body["input_digest"] = digest("tampered")
        out.write(json.dumps(body))
    elif mode == "record_unknown_field":
        out.write(record(invocation, {"success": {"output_json": "1"}}, signature="abc"))
    else:
        sys.stderr.write(f"unknown mode {mode}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
