"""Leases and fencing: the conditional writes every owner of a run goes through.

A lease is (owner, token, expiry) on the ``agent_runs`` row. Acquiring it bumps the token;
every write re-checks owner and token inside its own transaction (see :func:`fenced_append`),
so a fenced owner's write is rejected and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import apsw

from .._errors import (
    FencedOut,
    InvalidInput,
    InvalidLeaseTtl,
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    RunTerminal,
    StoreError,
)
from .._time import as_timedelta, to_db
from ..store import TERMINAL_STATUSES, SQLiteStore, scalar

__all__ = [
    "MIN_LEASE_TTL",
    "Lease",
    "NewEvent",
    "acquire",
    "check_fence",
    "check_run_id",
    "fenced_append",
    "new_owner_id",
    "validate_ttl",
]

log = logging.getLogger("zincir.lease")

MIN_LEASE_TTL = timedelta(milliseconds=30)

# (type, JSON payload text, tool call id or None)
NewEvent = tuple[str, str, str | None]


def validate_ttl(value: timedelta | float, *, run_id: str | None = None) -> timedelta:
    """A lease TTL as a timedelta, at least 30 ms."""
    try:
        ttl = as_timedelta(value, name="lease_ttl")
    except InvalidInput as error:
        raise InvalidLeaseTtl(error.detail, run_id=run_id) from None
    if ttl < MIN_LEASE_TTL:
        raise InvalidLeaseTtl(
            f"lease_ttl {ttl.total_seconds() * 1000:g} ms is below the 30 ms floor; "
            "use seconds in production",
            run_id=run_id,
        )
    return ttl


def check_run_id(run_id: object) -> str:
    """Run ids are non-empty text of at most 256 bytes without control characters."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidInput(f"a run id must be a non-empty string, not {run_id!r}")
    if len(run_id.encode("utf-8", "surrogatepass")) > 256:
        raise InvalidInput("a run id must be at most 256 bytes", run_id=run_id[:40])
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in run_id):
        raise InvalidInput(f"a run id must not hold control characters: {run_id!r}")
    return run_id


def new_owner_id() -> str:
    """A lease owner name unique to this context: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(slots=True)
class Lease:
    """The lease this process holds on a run."""

    run_id: str
    owner: str
    token: int
    ttl: timedelta

    def expiry(self, now: datetime) -> str:
        return to_db(now + self.ttl)


def diagnose(conn: apsw.Connection, run_id: str, token: int) -> Exception:
    """Why a fenced write matched no row: missing run, terminal run, or a newer owner."""
    row = conn.execute(
        "SELECT status, lease_token, lease_owner FROM agent_runs WHERE id = ?", (run_id,)
    ).fetchone()
    if row is None:
        return RunNotFound(f"no run {run_id!r} in this store", run_id=run_id)
    status, current, owner = row
    if status in TERMINAL_STATUSES:
        return RunTerminal(f"the run is {status}; nothing more can be written", run_id=run_id)
    if current != token:
        return FencedOut(
            f"lease token {token} was superseded by {current} (another owner recovered the "
            "run); stop this context, the write was rejected",
            run_id=run_id,
        )
    return FencedOut(
        "this context no longer holds the lease (released or lost); recover the run to write",
        run_id=run_id,
    )


def check_fence(conn: apsw.Connection, lease: Lease) -> None:
    """Raise unless ``lease`` still owns its run; a read, for marks that extend nothing."""
    held = conn.execute(
        "SELECT 1 FROM agent_runs WHERE id = ? AND lease_owner = ? AND lease_token = ? "
        "AND status IN ('pending', 'running')",
        (lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if held is None:
        raise diagnose(conn, lease.run_id, lease.token)


def fenced_append(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    events: Iterable[NewEvent] = (),
) -> int:
    """Check the fence, extend the lease and append ``events``; return the last seq.

    Runs inside the caller's write transaction: the check and the write commit together.
    """
    batch = list(events)
    stamp = to_db(now)
    row = conn.execute(
        "UPDATE agent_runs SET last_seq = last_seq + ?, lease_expires_at = ?, updated_at = ? "
        "WHERE id = ? AND lease_owner = ? AND lease_token = ? "
        "AND status IN ('pending', 'running') RETURNING last_seq",
        (len(batch), lease.expiry(now), stamp, lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if row is None:
        raise diagnose(conn, lease.run_id, lease.token)
    last_seq: int = row[0]
    if len(batch) == 1:
        kind, payload, call_id = batch[0]
        conn.execute(
            "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (lease.run_id, last_seq, kind, payload, stamp, call_id),
        )
    elif batch:
        created = stamp
        first = last_seq - len(batch) + 1
        conn.executemany(
            "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (lease.run_id, first + i, kind, payload, created, call_id)
                for i, (kind, payload, call_id) in enumerate(batch)
            ],
        )
    return last_seq


def acquire(
    conn: apsw.Connection,
    run_id: str,
    owner: str,
    ttl: timedelta,
    now: datetime,
    *,
    force: bool,
) -> tuple[int, str]:
    """Take the lease of an existing non-terminal run; return (token, status before)."""
    row = conn.execute(
        "SELECT status, lease_owner, lease_expires_at FROM agent_runs WHERE id = ?", (run_id,)
    ).fetchone()
    if row is None:
        raise RunNotFound(f"no run {run_id!r} in this store", run_id=run_id)
    status, holder, expires = row
    if status in TERMINAL_STATUSES:
        raise RunTerminal(f"the run is {status} and cannot be recovered", run_id=run_id)
    if not force and holder is not None and expires is not None and expires > to_db(now):
        raise LeaseHeld(
            f"owner {holder} holds a live lease until {expires}; wait for it to expire, or "
            "force_recover once that process is confirmed dead",
            run_id=run_id,
        )
    token: int = scalar(
        conn,
        "UPDATE agent_runs SET lease_owner = ?, lease_token = lease_token + 1, "
        "lease_expires_at = ?, updated_at = ? WHERE id = ? RETURNING lease_token",
        (owner, to_db(now + ttl), to_db(now), run_id),
    )
    return token, status


def release(conn: apsw.Connection, lease: Lease, now: datetime) -> bool:
    """Drop the lease if this owner still holds it; False if it was already gone."""
    changed = conn.execute(
        "UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL, updated_at = ? "
        "WHERE id = ? AND lease_owner = ? AND lease_token = ? RETURNING 1",
        (to_db(now), lease.run_id, lease.owner, lease.token),
    ).fetchone()
    return changed is not None


class Heartbeat:
    """Renews a lease every ttl/3 in the background; remembers why it stopped, if it failed."""

    def __init__(self, store: SQLiteStore, lease: Lease) -> None:
        self._store = store
        self._lease = lease
        self.failure: LeaseLost | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._beat(), name=f"zincir-heartbeat:{self._lease.run_id}"
        )
        self._store.owner_started()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            self._store.owner_stopped()
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def check(self) -> None:
        """Raise LeaseLost if a renewal failed; called before every write."""
        if self.failure is not None:
            raise self.failure

    async def _beat(self) -> None:
        lease = self._lease
        interval = lease.ttl.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)

            def renew(conn: apsw.Connection) -> bool:
                now = self._store.clock()
                return conn.execute(
                    "UPDATE agent_runs SET lease_expires_at = ? WHERE id = ? "
                    "AND lease_owner = ? AND lease_token = ? "
                    "AND status IN ('pending', 'running') RETURNING 1",
                    (lease.expiry(now), lease.run_id, lease.owner, lease.token),
                ).fetchone() is not None

            try:
                renewed = await self._store.write(renew)
            except (StoreError, apsw.Error) as error:
                self.failure = LeaseLost(
                    f"lease renewal failed ({error}); recover the run before writing again",
                    run_id=lease.run_id,
                )
                log.warning("%s", self.failure)
                return
            if not renewed:
                self.failure = LeaseLost(
                    "the lease was taken over or released; this context must stop writing",
                    run_id=lease.run_id,
                )
                log.warning("%s", self.failure)
                return
