"""Run the reliability scenarios and write ``RELIABILITY.md``.

    python -m reliability [--short] [--only NAME ...] [--write PATH | --update PATH]
                          [--json PATH]

Without ``--only`` every scenario runs; ``--write`` rewrites the report (``make reliability``
runs the full counts and writes ``RELIABILITY.md``); ``--update`` rewrites only the sections
of the scenarios run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import apsw

from reliability._harness import Report

HERE = Path(__file__).resolve().parent


def scenarios() -> list[ModuleType]:
    """Every scenario module of this package, in report order."""
    found = [
        importlib.import_module(f"reliability.{info.name}")
        for info in pkgutil.iter_modules([str(HERE)])
        if not info.name.startswith("_")
    ]
    return sorted((module for module in found if hasattr(module, "run")), key=_order)


def _order(module: ModuleType) -> int:
    return int(getattr(module, "ORDER", 1000))


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _header(met: int, total: int) -> list[str]:
    return [
        "# Reliability",
        "",
        "zincir's promise is that a crash is a normal event. This file is the evidence: each",
        "section injects one kind of fault, counts what survived, and holds each count to a",
        "target. It is written by `make reliability` (full counts); `make test` runs the same",
        "scenarios at short counts and fails if any target is missed. Rerun one section with",
        "the command under its title (`--update RELIABILITY.md` rewrites just that section).",
        "",
        f"- Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, SQLite {apsw.sqlite_lib_version()}",
        f"- Targets met: {met} of {total} scenarios",
        "",
        "",
    ]


def render_section(report: Report) -> str:
    """One scenario's section: its command, when and at which commit it ran, its figures."""
    counts = "short counts" if report.short else "full counts"
    lines = [
        f"## {report.title}",
        "",
        f"`{report.command}` ({counts}, {report.seconds:,.0f} s; "
        f"{report.finished or datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit `{_commit()}`)",
        "",
        "| Figure | Value | Target | Met |",
        "| --- | ---: | --- | --- |",
    ]
    lines += [
        f"| {figure.name} | {figure.shown()} | {figure.target} | "
        f"{'yes' if figure.met else '**no**'} |"
        for figure in report.figures
    ]
    if report.notes:
        lines.append("")
        lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines) + "\n\n"


def render(reports: list[Report]) -> str:
    """``RELIABILITY.md``: the machine, then each scenario's figures against their targets."""
    met = sum(report.ok for report in reports)
    return "\n".join(_header(met, len(reports))) + "".join(map(render_section, reports))


def update(text: str, reports: list[Report], order: list[str]) -> str:
    """``text`` (a report this module wrote) with the sections of ``reports`` rewritten and
    every section in ``order`` (titles); a section is met when no figure in it missed."""
    _, *parts = re.split(r"(?m)^## ", text)
    sections = {part.split("\n", 1)[0]: "## " + part.rstrip("\n") + "\n\n" for part in parts}
    for report in reports:
        sections[report.title] = render_section(report)
    titles = [title for title in order if title in sections]
    titles += [title for title in sections if title not in order]
    met = sum("**no**" not in sections[title] for title in titles)
    return "\n".join(_header(met, len(titles))) + "".join(sections[t] for t in titles)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the counts `make test` runs")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    parser.add_argument("--write", type=Path, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--update", type=Path, help="rewrite only the run scenarios' sections of this report"
    )
    args = parser.parse_args(argv)
    modules = scenarios()
    order = [str(module.TITLE) for module in modules]
    if args.only:
        known = {module.__name__.rsplit(".", 1)[1]: module for module in modules}
        unknown = sorted(set(args.only) - set(known))
        if unknown:
            parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {sorted(known)}")
        modules = [known[name] for name in args.only]
    reports = []
    for module in modules:
        started = time.perf_counter()
        print(f"{module.TITLE} …", file=sys.stderr, flush=True)
        report: Report = module.run(short=args.short)
        report.seconds = time.perf_counter() - started
        report.finished = datetime.now(UTC)
        reports.append(report)
        for line in report.failures():
            print(f"  missed: {line}", file=sys.stderr)
        print(f"  {'ok' if report.ok else 'MISSED'} in {report.seconds:,.0f} s", file=sys.stderr)
    if args.write:
        args.write.write_text(render(reports))
    if args.update:
        previous = args.update.read_text() if args.update.exists() else ""
        args.update.write_text(update(previous, reports, order))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    report.key: {
                        "ok": report.ok,
                        "figures": {f.name: f.value for f in report.figures},
                    }
                    for report in reports
                },
                indent=2,
            )
        )
    return 0 if all(report.ok for report in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
