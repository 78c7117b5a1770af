"""Bad input that reaches a real SQLite file through the public API: refused, nothing written.

Broken invocations go through ``LocalRuntime.execute`` and broken values through
``AgentContext`` (create, record_response, record_tool_result, checkpoint). After every
refusal the database's logical dump must equal the one before it; after a batch of refusals
only, the file's bytes (after a WAL checkpoint) must equal those before it.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import apsw

import zincir
from reliability._fuzz_core import Mutator, Tally, json_values
from zincir import (
    AgentContext,
    HandlerRegistry,
    Invocation,
    LocalRuntime,
    OperationKind,
    RetryPolicy,
    ToolCall,
    Verification,
    ZincirError,
)

__all__ = ["StoreFuzz", "database_dump", "file_digest"]


def database_dump(path: Path) -> str:
    """sha256 of every row of every table, read through a separate read-only connection."""
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        digest = hashlib.sha256()
        conn.execute("BEGIN")
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
            )
        ]
        for table in tables:
            digest.update(table.encode())
            rows = sorted(repr(row) for row in conn.execute(f'SELECT * FROM "{table}"'))
            for row in rows:
                digest.update(row.encode("utf-8", "surrogatepass"))
        conn.execute("COMMIT")
        return digest.hexdigest()
    finally:
        conn.close()


def file_digest(path: Path) -> str | None:
    """sha256 of a file's bytes, None when it does not exist."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def checkpointed_digest(path: Path) -> tuple[str | None, str | None]:
    """The database and -wal bytes after folding the WAL into the file."""
    conn = apsw.Connection(str(path))
    try:
        conn.setbusytimeout(5000)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return file_digest(path), file_digest(Path(f"{path}-wal"))


class _Unrepresentable:
    """A value no JSON encoder knows."""


def _strange_values(rng: random.Random) -> list[Any]:
    """Values a caller might pass that zincir must store exactly or refuse."""
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    return [
        math.nan,
        math.inf,
        {"k": math.nan},
        {1: "int key"},
        {("t",): 1},
        {"s": {1, 2}},
        b"bytes",
        _Unrepresentable(),
        "\ud800",
        {"\udc80": 1},
        deep,
        "x" * (17 * 1024 * 1024),
        2**80,
        *json_values(rng, 2),
    ]


class StoreFuzz:
    """One run of broken input against a real store file; counts and the partial writes."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path = path
        self.rng = rng
        self.runtime_tally = Tally("LocalRuntime.execute")
        self.context_tally = Tally("AgentContext writes")
        self.partial_writes = 0
        self.byte_batches = 0
        self.evidence: list[str] = []
        self.values = _strange_values(rng)

    async def run(self, attempts: int) -> None:
        """``attempts`` broken inputs, mixed, then a batch of refusals checked byte for byte."""
        store = zincir.open_store(self.path, synchronous="normal")
        try:
            registry = HandlerRegistry()
            for kind in OperationKind:
                registry.register(kind, "echo", _echo)
            runtime = LocalRuntime(store, registry, RetryPolicy.no_retry())
            ctx = await AgentContext.create(
                store, name="fuzz", run_id="fuzz-run", lease_ttl=timedelta(hours=1)
            )
            await ctx.record_response("open", [ToolCall("open-call", "t", {})], "tool_use")
            try:
                for index in range(attempts):
                    if index % 2:
                        await self._one(self.runtime_tally, lambda: self._invocation(runtime))
                    else:
                        await self._one(self.context_tally, self._context_write(store, ctx))
                await self._refusals_only(store, ctx, runtime, max(10, attempts // 10))
            finally:
                await ctx.close()
        finally:
            await store.close()

    async def _one(self, tally: Tally, attempt: Callable[[], Awaitable[Any]]) -> bool:
        """One attempt; True when it was refused with a zincir error (and nothing changed)."""
        before = database_dump(self.path)
        tally.tried += 1
        try:
            await attempt()
        except ZincirError:
            tally.refused += 1
            if database_dump(self.path) != before:
                self.partial_writes += 1
                self._evidence(f"{tally.name}: a refused input changed the database")
            return True
        except Exception as error:
            tally.untyped += 1
            tally.note(f"{type(error).__name__}: {error}"[:300])
            return False
        tally.accepted += 1
        return False

    def _invocation(self, runtime: LocalRuntime) -> Awaitable[Any]:
        rng = self.rng
        fields: dict[str, Any] = {
            "run_id": "ops-run",
            "step_id": "tool.call",
            "sequence": rng.randrange(1_000_000),
            "kind": rng.choice(list(OperationKind)),
            "handler_id": "echo",
            "input_json": '{"q":"x"}',
        }
        name = rng.choice(list(fields))
        broken: list[Any] = ["", "\x00", "\ud800", "a\nb", "x" * 300, None, -1, 2**63, True, 1.5]
        if name == "input_json":
            fields[name] = (
                Mutator([b'{"q":"x","n":[1,2]}'], rng).mutate().decode("utf-8", "surrogateescape")
            )
        else:
            fields[name] = rng.choice(broken)
        return runtime.execute(Invocation(**fields))

    def _context_write(
        self, store: zincir.SQLiteStore, ctx: AgentContext
    ) -> Callable[[], Awaitable[Any]]:
        rng = self.rng
        value = rng.choice(self.values)
        call_id = rng.choice(["", "\x00", "\ud800", "x" * 300, "ok-" + str(rng.random()), None, 5])
        choice = rng.randrange(5)
        if choice == 0:
            return lambda: ctx.record_response(value, [ToolCall(call_id, "t", {"v": value})])  # type: ignore[arg-type]
        if choice == 1:
            return lambda: ctx.record_tool_result(call_id, value)  # type: ignore[arg-type]
        if choice == 2:
            return lambda: ctx.checkpoint(
                {"completed": [value], "evidence": {"v": value}}, lambda c: Verification(True)
            )
        if choice == 3:
            return lambda: AgentContext.create(
                store,
                name=rng.choice(["", "\x00", "n", value]),
                config=value,
                run_id=call_id,  # type: ignore[arg-type]
            )
        return lambda: ctx.record_response(
            "x", [{"id": call_id, "name": value, "arguments": value}]
        )

    async def _refusals_only(
        self, store: zincir.SQLiteStore, ctx: AgentContext, runtime: LocalRuntime, count: int
    ) -> None:
        """Inputs that must all be refused; the file's bytes after a checkpoint are compared."""
        before = checkpointed_digest(self.path)
        refused = 0
        for index in range(count):
            bad: Any = "\ud800" if index % 2 else math.nan
            broken = Invocation("ops-run", "s", index, "tool_call", "echo", '{"a":NaN}')
            attempts: list[Callable[[], Awaitable[Any]]] = [
                partial(ctx.record_response, bad, []),
                partial(ctx.record_tool_result, "open-call", {"v": bad}),
                partial(runtime.execute, broken),
                partial(AgentContext.create, store, name="n", config={"v": bad}),
            ]
            tally = self.runtime_tally if index % 4 == 2 else self.context_tally
            refused += await self._one(tally, attempts[index % len(attempts)])
        after = checkpointed_digest(self.path)
        self.byte_batches += 1
        if refused == count and after != before:
            self.partial_writes += 1
            self._evidence("a batch of refused inputs changed the file's bytes")

    def _evidence(self, text: str) -> None:
        if len(self.evidence) < 5:
            self.evidence.append(text)


async def _echo(invocation: Invocation, request: Any) -> Any:
    return {"echo": request}


def fuzz_store(path: Path, attempts: int, seed: int) -> StoreFuzz:
    """Run :class:`StoreFuzz` on a new database at ``path``."""
    fuzz = StoreFuzz(path, random.Random(seed))
    asyncio.run(fuzz.run(attempts))
    return fuzz
