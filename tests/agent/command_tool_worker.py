"""The reference agent's tools as a ``CommandHandler`` worker: one process per tool call.

    python command_tool_worker.py LOG

Reads the invocation (one JSON object) on stdin, decodes its ``ToolRequest``, runs the tool
(each call appends ``command <tool> <n> <step_id>#<sequence>`` to LOG and fsyncs it) and
prints the ``ToolOutput`` document on stdout. An unknown tool exits with status 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from zincir.contract.payloads import ToolOutput, ToolRequest  # noqa: E402


def main(log: Path) -> int:
    invocation = json.loads(sys.stdin.read())
    request = ToolRequest.from_json(invocation["input_json"])
    name = request.call.tool_name
    if name not in ("first", "second"):
        sys.stderr.write(f"no tool {name!r}\n")
        return 2
    n = request.arguments["n"]
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"command {name} {n} {invocation['step_id']}#{invocation['sequence']}\n")
        out.flush()
        os.fsync(out.fileno())
    output = ToolOutput(
        tool_call_id=request.call.tool_call_id, tool_name=name, content={"tool": name, "n": n}
    )
    sys.stdout.write(output.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
