"""The long run's conversation, and the same conversation on LangGraph's ``SqliteSaver``.

    .venv-peers/bin/python benchmarks/long_run_peer.py DB_PATH TURNS MARKS

The conversation (shared with benchmarks/long_run.py, which imports this module; nothing
here imports zincir): a prompt, then per turn a short assistant reply asking for one tool
call and the tool's result, about 2 KB of deterministic text. On LangGraph it is a messages
graph (``add_messages``) with one node that adds a turn's two messages, one super-step a
turn, ``durability="sync"``; the database's bytes are read at each turn of MARKS (a comma
list) once that turn's checkpoint is written. Prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from typing import Any

PROMPT = "Read the catalogue section by section and keep notes until told to stop."
TOOL = "read_section"
TOOL_TEXT_BYTES = 2048


def tool_text(turn: int) -> str:
    """A tool result of exactly ``TOOL_TEXT_BYTES`` ASCII characters, different every turn."""
    lines, size = [], 0
    row = 0
    while size < TOOL_TEXT_BYTES:
        digest = hashlib.sha256(f"{turn}:{row}".encode()).hexdigest()
        line = f"section {turn} row {row}: item {digest[:16]} price {int(digest[16:20], 16)} "
        line += f"note {digest[20:64]}\n"
        lines.append(line)
        size += len(line)
        row += 1
    return "".join(lines)[:TOOL_TEXT_BYTES]


def reply_text(turn: int) -> str:
    """The model's short reply of ``turn`` (1-based), beside its tool call."""
    return f"Reading section {turn}."


def call_id(turn: int) -> str:
    return f"call-{turn}"


def database_bytes(path: str) -> int:
    """The database's bytes once its WAL is checkpointed into it (TRUNCATE): the main file
    plus the WAL, which is then empty."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    wal = path + "-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def sqlitesaver_run(path: str, turns: int, marks: set[int]) -> dict[str, Any]:
    """The conversation of ``turns`` turns on ``SqliteSaver``: bytes at ``marks``, turn times."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    sizes: dict[int, int] = {}
    entered: list[float] = []  # each turn's start, and when the run returned
    ready: list[float] = []  # each turn's start once the bytes were read

    def done_turns(state: Any) -> int:
        return (len(state["messages"]) - 1) // 2

    def turn(state: Any) -> dict[str, Any]:
        done = done_turns(state)
        entered.append(time.perf_counter())
        if done in marks:
            sizes[done] = database_bytes(path)
        ready.append(time.perf_counter())
        number = done + 1
        call = {"name": TOOL, "args": {"section": number}, "id": call_id(number)}
        return {
            "messages": [
                AIMessage(content=reply_text(number), tool_calls=[call]),
                ToolMessage(content=tool_text(number), tool_call_id=call_id(number), name=TOOL),
            ]
        }

    def more(state: Any) -> str:
        return "turn" if done_turns(state) < turns else END

    builder = StateGraph(MessagesState)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_conditional_edges("turn", more, ["turn", END])
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config = {"configurable": {"thread_id": "long-run"}, "recursion_limit": turns + 10}
    started = time.perf_counter()
    graph.invoke({"messages": [HumanMessage(content=PROMPT)]}, config, durability="sync")
    elapsed = time.perf_counter() - started
    entered.append(time.perf_counter())
    conn.close()
    if turns in marks:
        sizes[turns] = database_bytes(path)
    return {
        "sizes": {str(k): v for k, v in sorted(sizes.items())},
        "turn_s": [after - before for before, after in zip(ready, entered[1:], strict=True)],
        "elapsed_s": elapsed,
    }


def main() -> None:
    path, turns, marks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    chosen = {int(mark) for mark in marks.split(",") if mark}
    print(json.dumps(sqlitesaver_run(path, turns, chosen)))


if __name__ == "__main__":
    main()
