"""Durable named steps: a claim, the body run, the JSON result stored once.

A claim left by another context blocks the step with StepInProgress until ``recover()``
releases it: zincir cannot tell a slow body from a dead one, so only the caller, who knows
the old process is gone, may allow a second execution. A claim of this very context whose
body no longer runs in this process (its result write failed) is claimed again. Which
bodies run is tracked per lease in this process, so two concurrent calls of one step never
both run it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import _telemetry as telemetry
from .._crash import crash_point
from .._errors import InvalidInput, StepInProgress
from .._json import dumps, loads_own
from .._replay import step_item
from .._validate import check_id
from ._core import Core

__all__ = ["recover_steps", "run_step"]

# (run id, lease owner, lease token, step name) of every step body running in this process.
_IN_FLIGHT: set[tuple[str, str, int, str]] = set()


def _in_flight(core: Core) -> list[str]:
    """Names of the steps whose bodies this context's lease is running now."""
    lease = core.lease
    return [
        name
        for run_id, owner, token, name in _IN_FLIGHT
        if (run_id, owner, token) == (lease.run_id, lease.owner, lease.token)
    ]


async def run_step(
    core: Core, name: str, fn: Callable[[], Any], next_name: str | None = None
) -> Any:
    """Return the stored result of step ``name``, or claim it, run ``fn`` and store its result.

    A first run costs two transactions (the claim, then the result); a replay one that
    writes nothing. With ``next_name`` the result's transaction also claims that step, so
    when it is the next step run here it needs only its result's transaction. A name the
    run never recorded, asked for while recorded steps remain to replay, raises
    VersionDivergence before anything is claimed.
    """
    run_id = core.run_id
    check_id(name, "a step name", run_id=run_id)
    if next_name is not None:
        check_id(next_name, "the next step's name", run_id=run_id)
        if next_name == name:
            raise InvalidInput(f"step {name!r} cannot be its own next step", run_id=run_id)
    if not callable(fn):
        raise InvalidInput(f"step {name!r}: fn must be callable, not {fn!r}", run_id=run_id)
    replay = core.agent.replay
    if replay.settled:
        return await _claim_and_run(core, name, fn, next_name)
    async with replay.request(step_item(name)):
        return await _claim_and_run(core, name, fn, next_name)


async def _claim_and_run(
    core: Core, name: str, fn: Callable[[], Any], next_name: str | None
) -> Any:
    run_id = core.run_id
    lease = core.lease
    running = (run_id, lease.owner, lease.token, name)
    if running in _IN_FLIGHT:
        raise StepInProgress(
            f"step {name!r} is running in this context and has not finished; await that "
            "call (recover() releases only claims whose body no longer runs)",
            run_id=run_id,
        )
    core.check()
    _IN_FLIGHT.add(running)
    try:
        if core.claimed_ahead == name:  # claimed with the previous step's result
            core.claimed_ahead = None
        else:
            await core.release_ahead()  # the code went elsewhere: that step is never run
            claim = await core.store.claim_step(lease, name)
            if claim.status == "completed":
                return claim.result
            if claim.status == "held":
                raise StepInProgress(
                    f"step {name!r} was claimed by {claim.owner} (lease token {claim.token}), "
                    "to run or, claimed ahead, to run next, and has not finished; if that "
                    "process is confirmed dead, call recover() and run the step again",
                    run_id=run_id,
                )
        crash_point("step.claimed")
        try:
            core.check()  # the claim's write may have waited: no body starts on a lapsed lease
            if telemetry.tracer() is None:  # no tracing: the body alone, as cheap as before
                value = fn()
                if inspect.isawaitable(value):
                    value = await value
            else:
                with telemetry.step_span(run_id, name, await core.attempt_context()):
                    value = fn()
                    if inspect.isawaitable(value):
                        value = await value
            result_json = dumps(
                value, what=f"the result of step {name!r}", run_id=run_id, convert=True
            )
        except BaseException:
            await core.drop_claim(name)  # the step can be retried
            raise
        crash_point("step.body_done")
        core.check()
        if next_name is None:
            await core.store.finish_step(lease, name, result_json)
        elif await core.store.finish_step_and_claim(lease, name, result_json, next_name):
            core.claimed_ahead = next_name
        crash_point("step.completed")
        # Return the stored form, so a first run and a replay see the same value.
        return loads_own(result_json)
    finally:
        _IN_FLIGHT.discard(running)


async def recover_steps(core: Core) -> list[str]:
    """Release the run's unfinished step claims except those whose bodies this context runs
    (a claim made ahead is released too); return their names."""
    core.check()
    core.claimed_ahead = None
    return await core.store.recover_steps(core.lease, in_flight=_in_flight(core))
