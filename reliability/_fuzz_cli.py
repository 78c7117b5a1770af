"""Fuzzed command lines for ``zincir``: run ids, thread and approval ids, paths and options.

Each command line runs through click's CliRunner on a real zincir database (and on missing,
foreign and directory paths). It must end with exit code 0, 1 (a zincir error, one line) or
2 (a usage error), never an exception or a traceback; the database's rows must not change,
since no fuzzed command line names anything that exists. A few run as real processes too.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from reliability._fuzz_core import Tally
from reliability._fuzz_store import database_dump
from zincir.cli import main as cli

__all__ = ["fuzz_cli"]

_WEIRD = [
    "",
    " ",
    "-",
    "--",
    "-x",
    "--db",
    "\x00",
    "\t\n",
    "\x1b[31mred",
    "x" * 300,
    "é" * 200,
    "../../etc/passwd",
    "<script>",
    "'; DROP TABLE agent_runs; --",
    "%s%n",
    "{}",
    "[]",
    "null",
    '{"a":NaN}',
    "1e999",
    "-1",
    "0",
    "99999999999999999999999",
    "nan",
    "inf",
    "\udcff\udcfe",
    "sqlite://x",
    "sqlite:///",
    "postgresql://127.0.0.1:1/none",
]


def _text(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(_WEIRD)
    alphabet = "abc-_/.:%?#\\'\" é✓\x01\x7f\ud800"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def _command(rng: random.Random, paths: list[str]) -> list[str]:
    """One command line: a read or decide command, fuzzed arguments, a fuzzed ``--db``."""
    text = _text
    shapes = [
        ["runs", "list"],
        ["runs", "list", "--limit", text(rng)],
        ["runs", "list", "--status", text(rng)],
        ["runs", "list", "--version", text(rng)],
        ["runs", "show", text(rng)],
        ["threads", "list", "--limit", text(rng)],
        ["threads", "show", text(rng)],
        ["approvals", "list", "--run", text(rng)],
        ["approvals", "list", "--json"],
        ["approvals", "approve", text(rng), "--override", text(rng)],
        ["approvals", "approve", text(rng), "--args-sha256", text(rng)],
        ["approvals", "deny", text(rng), "--reason", text(rng)],
        ["approvals", "result", text(rng), text(rng)],
        ["check-compat", "no_such_module_" + text(rng) + ":f", "--timeout", text(rng)],
        ["check-compat", text(rng), "--run", text(rng)],
        [text(rng)],
        ["runs", text(rng)],
    ]
    args = list(rng.choice(shapes))
    if rng.random() < 0.9:
        args += ["--db", rng.choice(paths) if rng.random() < 0.8 else text(rng)]
    if rng.random() < 0.1:
        args.insert(rng.randrange(len(args) + 1), text(rng))
    return args


def fuzz_cli(db: Path, folder: Path, count: int, processes: int, rng: random.Random) -> Tally:
    """``count`` fuzzed command lines in process, ``processes`` more as real processes."""
    tally = Tally("CLI command lines")
    foreign = folder / "notes.txt"
    foreign.write_text("not a database\n")
    paths = [str(db), f"sqlite:///{db}", str(folder / "missing.db"), str(folder), str(foreign)]
    before = database_dump(db)
    runner = CliRunner()
    env = {"ZINCIR_DATABASE_PATH": str(folder / "default-missing.db")}
    for _ in range(count):
        args = _command(rng, paths)
        tally.tried += 1
        started = time.perf_counter()
        result = runner.invoke(cli, args, env=env)
        tally.timed(time.perf_counter() - started)
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        if crashed or result.exit_code not in (0, 1, 2) or "Traceback" in result.output:
            tally.untyped += 1
            error = result.exception
            tally.note(f"{args!r}: exit {result.exit_code}, {type(error).__name__}: {error}"[:300])
        elif result.exit_code == 0:
            tally.accepted += 1
        else:
            tally.refused += 1
    for _ in range(processes):
        _process(tally, _command(rng, paths), folder)
    if database_dump(db) != before:
        tally.untyped += 1
        tally.note("fuzzed command lines changed the database's rows")
    return tally


def _process(tally: Tally, args: list[str], folder: Path) -> None:
    """One command line as a real ``python -m zincir`` process (argv as the OS passes it)."""
    argv = [arg.encode("utf-8", "surrogatepass") for arg in args if "\x00" not in arg]
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "ZINCIR_DATABASE_PATH": str(folder / "none.db")}
    tally.tried += 1
    try:
        done = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"zincir", *argv],
            capture_output=True,
            timeout=60,
            env=env,
            cwd=folder,
        )
    except subprocess.TimeoutExpired:
        tally.hangs += 1
        tally.untyped += 1
        tally.note(f"{args!r}: no exit within 60 s")
        return
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    if done.returncode not in (0, 1, 2) or "Traceback" in output:
        tally.untyped += 1
        tally.note(f"{args!r}: exit {done.returncode}: {output[-300:]}")
    elif done.returncode == 0:
        tally.accepted += 1
    else:
        tally.refused += 1
