"""Render the figures of one ``benchmarks/run.py --json`` run into the performance page.

    python benchmarks/docs_table.py [RESULTS] [--page PAGE] [--check]

RESULTS (default benchmarks/results.json) is the file ``run.py --json`` wrote; the tables go
into PAGE (default docs/operations/performance/index.md) between the lines
``<!-- figures:start -->`` and ``<!-- figures:end -->``, replacing what was there. ``make
bench`` writes benchmarks/results.json and runs this. With ``--check`` nothing is written:
the exit status says whether the page already shows RESULTS (tests/docs checks the same).

The figures are grouped by what they measure, in the order the run took them; each keeps
its name in the run's JSON (the unit is the name's suffix), and a figure or ratio with a
target in run.py (``TARGETS``, ``FIGURE_TARGETS``) shows it and whether the run met it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from long_run import meets  # noqa: E402
from run import FIGURE_TARGETS, TARGETS  # noqa: E402

RESULTS = HERE / "results.json"
PAGE = HERE.parent / "docs" / "operations" / "performance" / "index.md"
START = "<!-- figures:start -->"
END = "<!-- figures:end -->"

# (title, name prefixes) in the order the page shows them; a name goes to the first group,
# in MATCH_ORDER, with a prefix of it. The long-run figures have a page of their own
# (long-run.md, written by the same run).
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("A step on SQLite", ("raw_", "step_")),
    ("64 concurrent runs", ("concurrent64_",)),
    ("Operations and the durable agent turn", ("agent_", "runtime_")),
    ("Peers: DBOS and LangGraph", ("dbos_", "langgraph_", "zincir_", "inmemory_")),
    ("pydantic-ai", ("pydantic_ai_",)),
    ("Resume, claims and the inspector", ("resume_", "claims_", "inspector_")),
    ("Durable streams", ("stream_",)),
    ("Encryption at rest", ("encryption_",)),
    ("Queues", ("queue_",)),
    ("OpenAI Agents SDK", ("openai_agents_",)),
    ("Retention", ("prune_", "compact_")),
    ("PostgreSQL", ("pg_", "dbos_pg_", "sqlite_4proc_")),
    ("Temporal", ("temporal_",)),
    ("Long runs", ("long_run_", "sqlitesaver_long_run_")),
]
MATCH_ORDER = ["Long runs", "Retention", "PostgreSQL"] + [
    title for title, _ in GROUPS if title not in {"Long runs", "Retention", "PostgreSQL"}
]
OTHER = "Other figures"
SKIPPED = {"Long runs"}
SYMBOLS = {"<=": "≤", ">=": "≥", "<": "<"}


def group_of(name: str) -> str:
    if name.endswith("_compact_ms"):  # resume_1m_before_compact_ms and _after_
        return "Retention"
    prefixes = dict(GROUPS)
    for title in MATCH_ORDER:
        if name.startswith(prefixes[title]):
            return title
    return OTHER


def number(value: float, ratio: bool) -> str:
    if ratio:
        return f"{value:,.2f}"
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:,.1f}"


def target(value: float, bound: tuple[str, float] | None) -> str:
    if bound is None:
        return ""
    met = "met" if meets(value, bound) else "**missed**"
    return f"{SYMBOLS[bound[0]]} {bound[1]:,g} {met}"


def machine_line(machine: dict[str, Any]) -> str:
    parts = [
        f"Python {machine['python']}",
        f"SQLite {machine['sqlite']}",
        f"{machine['cpus']} CPUs" + (f" ({machine['cpu']})" if machine.get("cpu") else ""),
        machine["platform"],
    ]
    flags = ["--quick" if machine.get("quick") else "full sizes"]
    if machine.get("peers"):
        flags.append("--peers")
    if machine.get("temporal"):
        flags.append("--temporal")
    date = machine.get("date", "an undated run")
    return f"The run of {date} ({', '.join(flags)}): {', '.join(parts)}."


def render(result: dict[str, Any]) -> str:
    """The Markdown between the markers: the run, then one table per group, then its notes."""
    rows: dict[str, list[str]] = {title: [] for title, _ in GROUPS}
    rows[OTHER] = []
    verdicts = []
    for kind, values, targets in (
        ("figure", result["figures"], FIGURE_TARGETS),
        ("ratio", result["ratios"], TARGETS),
    ):
        for name, value in values.items():
            group = group_of(name)
            verdict = target(value, targets.get(name))
            if verdict and group not in SKIPPED:
                verdicts.append(verdict.endswith(" met"))
            cells = (f"`{name}`", number(value, kind == "ratio"), verdict)
            rows[group].append("| " + " | ".join(cells) + " |")
    lines = [
        "<!-- Written by benchmarks/docs_table.py from benchmarks/results.json: edit neither by"
        " hand, run `make bench`. -->",
        "",
        machine_line(result["machine"]),
        f"Targets met: {sum(verdicts)} of {len(verdicts)}.",
        "",
    ]
    for title, table in rows.items():
        if not table or title in SKIPPED:
            continue
        lines += [f"### {title}", "", "| figure | value | target |", "| --- | ---: | --- |"]
        lines += [*table, ""]
    notes = {
        name: note
        for name, note in result.get("notes", {}).items()
        if group_of(name + "_") not in SKIPPED
    }
    if notes:
        lines += ["Notes of the run:", ""]
        lines += [f"- `{name}`: {note}" for name, note in notes.items()]
        lines.append("")
    return "\n".join(lines)


def shown(page: str) -> str:
    """What the page has between its markers."""
    head, start, rest = page.partition(START + "\n")
    body, end, _ = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the page has no {START} ... {END} block")
    return body


def with_table(page: str, table: str) -> str:
    head, _, rest = page.partition(START + "\n")
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--check", action="store_true", help="only say whether PAGE is current")
    args = parser.parse_args(argv)
    table = render(json.loads(args.results.read_text(encoding="utf-8")))
    page = args.page.read_text(encoding="utf-8")
    if args.check:
        current = shown(page) == table
        print(f"{args.page}: {'current' if current else 'out of date'} for {args.results}")
        return 0 if current else 1
    shown(page)  # refuse a page without the markers
    args.page.write_text(with_table(page, table), encoding="utf-8")
    print(f"{args.page}: the figures of {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
