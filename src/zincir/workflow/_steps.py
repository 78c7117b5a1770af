"""Durable named steps: a claim row, the body run once, the JSON result stored once.

A step's row in ``steps`` is its claim (``running``, with the lease owner and token) until
the result is stored (``completed``). A claim left by a dead process blocks the step with
StepInProgress until ``recover()`` releases it: zincir cannot tell a slow body from a dead
one, so only the caller, who knows the old process is gone, may allow a second execution.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import apsw

from .._errors import InvalidInput, StepInProgress
from .._json import dumps
from .._time import to_db
from ._core import Core, check_name

__all__ = ["recover_steps", "run_step"]

log = logging.getLogger("zincir.workflow")


def _stored(conn: apsw.Connection, run_id: str, name: str) -> tuple[str, Any, Any] | None:
    row = conn.execute(
        "SELECT status, result, claim_owner, claim_token FROM steps WHERE run_id = ? AND name = ?",
        (run_id, name),
    ).fetchone()
    return None if row is None else (row[0], row[1], (row[2], row[3]))


def _in_progress(run_id: str, name: str, claim: tuple[Any, Any]) -> StepInProgress:
    owner, token = claim
    return StepInProgress(
        f"step {name!r} was started by {owner} (lease token {token}) and has not finished; "
        "if that process is confirmed dead, call recover() and run the step again",
        run_id=run_id,
    )


async def run_step(core: Core, name: str, fn: Callable[[], Any]) -> Any:
    """Return the stored result of step ``name``, or claim it, run ``fn`` and store its result.

    A first run costs two transactions (the claim, then the result); a replay one that
    writes nothing.
    """
    run_id = core.run_id
    check_name(name, "a step name", run_id)
    if not callable(fn):
        raise InvalidInput(f"step {name!r}: fn must be callable, not {fn!r}", run_id=run_id)
    lease = core.lease

    def claim(conn: apsw.Connection, now: datetime) -> str | None:
        inserted = conn.execute(
            "INSERT INTO steps (run_id, name, status, claim_owner, claim_token, started_at) "
            "VALUES (?, ?, 'running', ?, ?, ?) ON CONFLICT (run_id, name) DO NOTHING "
            "RETURNING 1",
            (run_id, name, lease.owner, lease.token, to_db(now)),
        ).fetchone()
        if inserted is not None:
            # Fenced like every write, but the claim leaves the run's row (lease expiry,
            # seq) to the result's transaction: one page less to commit per step.
            core.check_fence(conn)
            return None
        row = _stored(conn, run_id, name)
        assert row is not None
        if row[0] == "completed":
            return str(row[1])
        raise _in_progress(run_id, name, row[2])

    # One transaction either returns the stored result (replay) or writes the claim. The
    # claim need not be fsynced: it survives a process crash, and after a power loss the
    # body's effect is as uncertain as the claim (steps are at least once).
    replayed = await core.write(claim, durable=False)
    if replayed is not None:
        return json.loads(replayed)
    try:
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        result_json = dumps(value, what=f"the result of step {name!r}", run_id=run_id)
    except BaseException:
        await _abandon(core, name)
        raise

    def finish(conn: apsw.Connection, now: datetime) -> None:
        core.fence(conn, now, [("step_completed", dumps({"name": name}), None)])
        stored = conn.execute(
            "UPDATE steps SET status = 'completed', result = ?, completed_at = ? "
            "WHERE run_id = ? AND name = ? AND status = 'running' "
            "AND claim_owner = ? AND claim_token = ? RETURNING 1",
            (result_json, to_db(now), run_id, name, lease.owner, lease.token),
        ).fetchone()
        if stored is None:
            raise StepInProgress(
                f"the claim on step {name!r} was released (recover()) while its body ran; "
                "its result was not stored",
                run_id=run_id,
            )

    await core.write(finish)
    # Return the stored form, so a first run and a replay see the same value.
    return json.loads(result_json)


async def _abandon(core: Core, name: str) -> None:
    """Remove this context's own claim after the body failed, so the step can be retried."""
    lease = core.lease

    def drop(conn: apsw.Connection) -> None:
        conn.execute(
            "DELETE FROM steps WHERE run_id = ? AND name = ? AND status = 'running' "
            "AND claim_owner = ? AND claim_token = ?",
            (lease.run_id, name, lease.owner, lease.token),
        )

    try:
        await core.store.write(drop)
    except Exception as error:  # the body's own error matters more; recover() cleans up
        log.warning("[run %s] could not release the claim on step %r: %s",
                    lease.run_id, name, error)


async def recover_steps(core: Core) -> list[str]:
    """Release step claims left unfinished by earlier owners; return their names."""
    lease = core.lease

    def release(conn: apsw.Connection, now: datetime) -> list[str]:
        core.fence(conn, now)
        names = [
            str(name)
            for (name,) in conn.execute(
                "DELETE FROM steps WHERE run_id = ? AND status = 'running' "
                "AND NOT (claim_owner IS ? AND claim_token IS ?) RETURNING name",
                (lease.run_id, lease.owner, lease.token),
            )
        ]
        if names:
            names.sort()
            core.fence(conn, now, [("steps_recovered", dumps({"names": names}), None)])
        return names

    return await core.write(release)
