"""Files that are not (or no longer) a zincir database, opened through every entry point.

Each bad file sits alone in its own folder. The read-only entry points (the read-only view,
the inspector, ``zincir runs list``) go first, then ``zincir.open_store``; each must refuse
with a zincir error (the CLI: exit code 1 and a one-line message) and leave the file's bytes
and its folder's listing as they were (no ``-wal``, ``-shm`` or ``-journal`` left behind).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
from click.testing import CliRunner

import zincir
from reliability._fuzz_core import Tally
from zincir import AgentContext, ToolCall, ZincirError
from zincir.cli import main as cli
from zincir.store import migrations
from zincir.store._readonly import open_read_only

__all__ = ["FileReport", "bad_files", "make_zincir_database", "probe_files"]

SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass
class FileReport:
    """What every entry point did with every bad file."""

    tally: Tally = field(default_factory=lambda: Tally("bad database files"))
    files: int = 0
    modified: int = 0
    accepted: list[str] = field(default_factory=list)
    modified_which: list[str] = field(default_factory=list)
    sidecars: list[str] = field(default_factory=list)
    errors_seen: set[str] = field(default_factory=set)


def make_zincir_database(path: Path) -> None:
    """A real zincir database with a few runs, closed cleanly (its WAL folded back)."""

    async def fill() -> None:
        store = zincir.open_store(path)
        try:
            for index in range(20):
                ctx = await AgentContext.create(store, name=f"agent-{index}", config={"i": index})
                await ctx.record_response("x" * 500, [ToolCall(f"c{index}", "t", {"i": index})])
                await ctx.record_tool_result(f"c{index}", {"ok": index})
                await ctx.complete({"done": index})
        finally:
            await store.close()

    asyncio.run(fill())


def _foreign(path: Path, wal: bool) -> None:
    conn = apsw.Connection(str(path))
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')")
    conn.close()


def _newer_schema(path: Path, template: bytes) -> None:
    path.write_bytes(template)
    conn = apsw.Connection(str(path))
    newest = migrations()[-1][0]
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
        (newest + 1, "from_the_future", "2099-01-01T00:00:00.000000Z"),
    )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _half_zincir(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT);"
        "INSERT INTO schema_migrations VALUES (1, 'not_ours', 'x');"
        "CREATE TABLE agent_runs (id TEXT)"
    )
    conn.close()


def bad_files(template: bytes, rng: random.Random) -> dict[str, Callable[[Path], None]]:
    """Every kind of bad file, by name, as a function that writes it at a path."""
    size = len(template)
    page = 4096

    def damaged(path: Path) -> None:
        data = bytearray(template)
        start = page * max(2, (size // page) // 2)
        data[start : start + page] = rng.randbytes(page)
        path.write_bytes(bytes(data))

    kinds: dict[str, Callable[[Path], None]] = {
        "another application's database": lambda p: _foreign(p, wal=False),
        "another application's database in WAL mode": lambda p: _foreign(p, wal=True),
        "an empty file": lambda p: p.write_bytes(b""),
        "random bytes (4 KiB)": lambda p: p.write_bytes(rng.randbytes(4096)),
        "random bytes (64 KiB)": lambda p: p.write_bytes(rng.randbytes(65536)),
        "a SQLite header then random bytes": lambda p: p.write_bytes(
            SQLITE_HEADER + rng.randbytes(8192 - len(SQLITE_HEADER))
        ),
        "zeros": lambda p: p.write_bytes(bytes(8192)),
        "a text file": lambda p: p.write_text("just some notes, not a database\n" * 200),
        "a newer zincir schema": lambda p: _newer_schema(p, template),
        "a foreign schema_migrations": _half_zincir,
        "a zincir database with a damaged page": damaged,
        "a directory": lambda p: p.mkdir(),
    }
    for cut in sorted({100, 1024, page, size // 2, size - page, size - 1}):
        kinds[f"a zincir database truncated to {cut:,} of {size:,} bytes"] = lambda p, cut=cut: (
            p.write_bytes(template[:cut])
        )
    return kinds


def _snapshot(path: Path) -> tuple[str | None, list[str]]:
    """The file's sha256 and its folder's listing."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return digest, sorted(os.listdir(path.parent))


def _read_only(path: Path) -> None:
    with open_read_only(path).snapshot() as reader:
        for run in reader.list_runs(None, 100):
            list(reader.iter_events(run["id"]))


def _inspector(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from zincir.inspector import create_app

    client = TestClient(
        create_app(path, address="127.0.0.1:8787"), base_url="http://127.0.0.1:8787"
    )
    for page in ("/", "/api/runs", "/threads"):
        response = client.get(page)
        if response.status_code == 500 and "failed to render" in response.text:
            raise RuntimeError(f"the inspector crashed on {page}")
    return None


class _CliRefused(ZincirError):
    """The CLI exited 1 with a one-line message: the typed refusal of a command line."""


def _cli(path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, [*args, "--db", str(path)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if "Traceback" in result.output:
        raise RuntimeError(f"the CLI printed a traceback: {result.output[-300:]}")
    if result.exit_code == 1:
        raise _CliRefused(result.output.strip().splitlines()[-1])
    if result.exit_code != 0:
        raise RuntimeError(f"exit code {result.exit_code}: {result.output[-300:]}")


def _open_store(path: Path) -> None:
    zincir.open_store(path).close_sync()


ENTRY_POINTS: tuple[tuple[str, Callable[[Path], Any]], ...] = (
    ("the read-only view", _read_only),
    ("the inspector", _inspector),
    ("zincir runs list", lambda p: _cli(p, ["runs", "list"])),
    ("zincir runs show", lambda p: _cli(p, ["runs", "show", "some-run"])),
    ("zincir.open_store", _open_store),
)


def probe_files(folder: Path, rng: random.Random) -> FileReport:
    """Write every bad file and open it through every entry point."""
    report = FileReport()
    template_path = folder / "template" / "zincir.db"
    template_path.parent.mkdir(parents=True)
    make_zincir_database(template_path)
    template = template_path.read_bytes()
    kinds = dict(bad_files(template, rng))
    kinds["no file at all"] = lambda p: None
    for index, (kind, write) in enumerate(kinds.items()):
        path = folder / f"case-{index}" / "zincir.db"
        path.parent.mkdir(parents=True)
        write(path)
        report.files += 1
        for entry, open_it in ENTRY_POINTS:
            _probe(report, kind, entry, path, open_it)
        shutil.rmtree(path.parent)
    return report


def _probe(
    report: FileReport, kind: str, entry: str, path: Path, open_it: Callable[[Path], Any]
) -> None:
    """One entry point on one bad file; a refusal must leave the file's bytes as they were
    (files it left beside it are counted, then removed)."""
    before = _snapshot(path)
    tally = report.tally
    tally.tried += 1
    try:
        open_it(path)
    except ZincirError as error:
        tally.refused += 1
        report.errors_seen.add(type(error).__name__)
        digest, listing = _snapshot(path)
        if digest != before[0]:
            report.modified += 1
            report.modified_which.append(f"{kind} via {entry}")
        left = sorted(set(listing) - set(before[1]))
        if left:
            report.sidecars.append(f"{kind} via {entry}: {', '.join(left)}")
            for name in left:  # the next entry point starts from the file as it was
                (path.parent / name).unlink()
        return
    except Exception as error:
        tally.untyped += 1
        tally.note(f"{kind} via {entry}: {type(error).__name__}: {error}"[:300])
        return
    tally.accepted += 1
    report.accepted.append(f"{kind} via {entry}")
