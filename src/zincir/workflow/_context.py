"""WorkflowContext: durable named steps, sleep, messages and child runs over one run's lease.

A WorkflowContext wraps an :class:`~zincir.AgentContext`: ``open()`` creates or takes over
the run and adopts the new lease, ``from_agent()`` reuses a lease someone else acquired (a
ResumeWorker claim). Either way one lease and one heartbeat cover both APIs, and closing
either releases it.

Replay relies on the workflow code being deterministic: steps, timers and spawns are keyed by
name, and unnamed sends and receives by their order within the context. A context that takes
over a run reads its log once and checks the new code against it: a step the run never
recorded, asked for while recorded steps remain to replay, raises VersionDivergence before
anything runs (see ``zincir._replay``); ``patched(id)`` lets new code branch around runs
that already passed a point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from .._errors import InvalidInput
from .._json import dumps
from .._validate import (
    DEFAULT_POLL_INTERVAL,
    check_id,
    check_lease_ttl,
    check_positive_duration,
)
from ..runs._budget import Budget, check_budget_arg
from ..runs._context import DEFAULT_LEASE_TTL, AgentContext
from ..runs._versions import app_version_or_default
from ..store import ChildResult, ReceivedMessage, Store, as_store, new_owner_id
from ._children import join_child, spawn_child
from ._core import Core, Sleeper, default_sleeper
from ._messages import receive, send_from_run
from ._steps import recover_steps, run_step
from ._timers import durable_sleep

__all__ = ["WorkflowContext"]


def _interval(value: object) -> float:
    return check_positive_duration(value, "poll_interval").total_seconds()


def _sleeper(value: object) -> Sleeper:
    if value is None:
        return default_sleeper
    if not callable(value):
        raise InvalidInput(f"sleeper must be an async callable taking seconds, not {value!r}")
    return value


class WorkflowContext:
    """Durable steps, sleep, messages and child runs for one run whose lease it holds.

    ``sleeper`` is how the context waits (``asyncio.sleep`` by default; tests inject one that
    moves a fake clock). ``poll_interval`` is how often a pending recv or join looks for its
    message or child. With ``suspend_waits=True`` an unsatisfied wait is stored and raised as
    :class:`WorkflowSuspended` instead of waiting here, so a ResumeWorker handler returns and
    the run is dispatched again when the wait is satisfied.
    """

    def __init__(
        self,
        agent: AgentContext,
        *,
        sleeper: Sleeper | None = None,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
        suspend_waits: bool = False,
    ) -> None:
        if not isinstance(agent, AgentContext):
            raise InvalidInput(f"expected an AgentContext, not {type(agent).__name__}")
        self._budgeted = False  # opened with a budget: each step checks it first
        self._core = Core(
            agent,
            sleeper=_sleeper(sleeper),
            poll_interval=_interval(poll_interval),
            suspend_waits=bool(suspend_waits),
        )

    # -- acquisition --------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        store: Store,
        run_id: str,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        *,
        name: str = "workflow",
        config: Any = None,
        sleeper: Sleeper | None = None,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
        suspend_waits: bool = False,
        app_version: str | None = None,
        budget: Budget | None = None,
    ) -> WorkflowContext:
        """Create run ``run_id`` if absent, else take it over; raises LeaseHeld while live.

        With ``budget`` (its ``wall_time`` counts from the run's creation), each step first
        checks it: BudgetExceeded, the run paused or failed as the budget says.

        A created run records ``app_version`` (default ``$ZINCIR_APP_VERSION``, else none:
        unversioned); a run taken over keeps its own.

        Every call takes a new fencing token. A terminal run raises RunTerminal. A new owner
        replays the workflow, which records again any wait still pending; it reads the run's
        log once here, to check the steps it asks for against those recorded.
        """
        as_store(store)
        check_id(run_id)
        ttl = check_lease_ttl(lease_ttl, run_id=run_id)
        check_id(name, "a run name", run_id=run_id)
        config_json = dumps({} if config is None else config, what="config", run_id=run_id)
        check_budget_arg(budget, run_id)
        wait = _sleeper(sleeper)
        interval = _interval(poll_interval)
        version = app_version_or_default(app_version, run_id=run_id)
        lease = await store.open_run(
            run_id,
            name=name,
            owner=new_owner_id(),
            ttl=ttl,
            config_json=config_json,
            app_version=version,
        )
        agent = AgentContext.adopt(store, lease, lend=False)  # the workflow's own lease
        if not agent.replay.settled:  # taken over: what earlier owners recorded, read once
            try:
                await agent.replay.load()
            except BaseException:
                await agent.close()
                raise
        workflow = cls(agent, sleeper=wait, poll_interval=interval, suspend_waits=suspend_waits)
        if budget is not None:
            await agent.set_budget(budget)
            workflow._budgeted = True
        return workflow

    @classmethod
    def from_agent(
        cls,
        ctx: AgentContext,
        *,
        sleeper: Sleeper | None = None,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
        suspend_waits: bool = False,
    ) -> WorkflowContext:
        """Use the lease of an AgentContext (e.g. from a ResumeWorker) for workflow calls."""
        return cls(ctx, sleeper=sleeper, poll_interval=poll_interval, suspend_waits=suspend_waits)

    # -- identity -----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._core.run_id

    @property
    def lease_token(self) -> int:
        return self._core.lease.token

    @property
    def store(self) -> Store:
        return self._core.store

    @property
    def agent(self) -> AgentContext:
        """The AgentContext sharing this lease (record responses, checkpoints, state)."""
        return self._core.agent

    @property
    def suspend_waits(self) -> bool:
        return self._core.suspend_waits

    # -- durable primitives -------------------------------------------------------------

    async def step(self, name: str, fn: Callable[[], Any], *, next: str | None = None) -> Any:
        """Run ``fn`` (sync or async) once and store its JSON result; replay returns it.

        ``next`` names the step the code runs after this one: its claim is committed with
        this step's result, so that step then costs one transaction instead of two. A claim
        ahead that the code does not use (it runs another step first, waits durably, or the
        context ends) is released, never run. A crash after this step's result leaves the
        next step claimed: like a crash inside a body, it raises StepInProgress until
        :meth:`recover`.

        The value returned is the stored JSON form (a tuple comes back as a list) on the
        first run as on replay. A body that raises stores nothing and may be retried; a
        result JSON cannot hold raises NotJsonSerializable. A step left running by another
        context, or still running in this one, raises StepInProgress (the former until
        :meth:`recover`); one whose result write failed here runs again when called again.

        On a run taken over, a recorded step replays in whatever order it is asked for; a
        name the run never recorded, asked for while recorded steps remain that this context
        has not replayed, raises VersionDivergence before anything is claimed or run (the run
        was started by other code). Once every recorded step was replayed, new names run.
        """
        if self._budgeted:
            await self._core.agent.check_budget("step")
        return await run_step(self._core, name, fn, next)

    async def steps(self, steps: Sequence[tuple[str, Callable[[], Any]]]) -> list[Any]:
        """Run ``(name, fn)`` steps in order, each claiming the next with its result (see
        :meth:`step`'s ``next``): n new steps cost n + 1 transactions instead of 2n.
        Returns their results in order."""
        items = list(steps)
        if not all(isinstance(item, tuple) and len(item) == 2 for item in items):
            raise InvalidInput("steps must be (name, fn) pairs", run_id=self.run_id)
        results = []
        for index, (name, fn) in enumerate(items):
            following = items[index + 1][0] if index + 1 < len(items) else None
            results.append(await self.step(name, fn, next=following))
        return results

    async def patched(self, patch_id: str) -> bool:
        """True when the run reaches this point on code that has the change ``patch_id``;
        False on the replay of a run that passed this point without it.

        ``if await wf.patched("new-path"): ... else: ...`` keeps old runs on the old path
        and sends the others down the new one. The first True records a ``patch_marker``
        event, so every replay answers the same, across kills.
        """
        return await self._core.agent.patched(patch_id)

    async def unreplayed(self) -> list[str]:
        """Recorded steps and operations this context has not replayed, in log order (e.g.
        ``["step 'notify'"]`` once new code dropped that step): not an error, a report."""
        return await self._core.agent.unreplayed()

    async def recover(self) -> list[str]:
        """Release unfinished step claims; returns the released step names.

        It releases the claims of earlier owners and this context's own claims whose body no
        longer runs (a result write that failed), never a body still running here. Call it
        only once the previous process is confirmed dead: a released step runs its body
        again (at least once, never concurrently with a live owner's body).
        """
        return await recover_steps(self._core)

    async def sleep(self, name: str, duration: timedelta | float) -> None:
        """Sleep until a stored wake time (now + ``duration`` on the first call).

        A restarted sleep with the same name waits only the remaining time; a due timer
        returns at once and is marked completed.
        """
        with self._core.agent.replay.busy():
            await durable_sleep(self._core, name, duration)

    async def send(
        self, to_run_id: str, topic: str, payload: Any, *, key: str | None = None
    ) -> int:
        """Send a durable message to run ``to_run_id``; returns the message id.

        The send is keyed by ``key`` or, without it, by its order among this context's sends
        to (``to_run_id``, ``topic``), so a replayed send returns the first message's id.
        """
        with self._core.agent.replay.busy():
            return await send_from_run(self._core, to_run_id, topic, payload, key)

    async def recv(
        self, topic: str, timeout: timedelta | float | None = None, *, key: str | None = None
    ) -> Any:
        """Receive the next message on ``topic`` and return its payload (None on timeout).

        Keyed like :meth:`send`; a replayed receive returns the same message (or the same
        timeout). The timeout is a stored deadline: a restart waits only what remains.
        """
        with self._core.agent.replay.busy():
            message = await receive(self._core, topic, timeout, key)
        return None if message is None else message.payload

    async def recv_message(
        self, topic: str, timeout: timedelta | float | None = None, *, key: str | None = None
    ) -> ReceivedMessage | None:
        """Like :meth:`recv` but returns the whole :class:`ReceivedMessage` (sender, id, time)."""
        with self._core.agent.replay.busy():
            return await receive(self._core, topic, timeout, key)

    async def spawn(
        self,
        name: str,
        config: Any = None,
        *,
        run_id: str | None = None,
        run_name: str | None = None,
    ) -> str:
        """Create child run ``name`` (pending, ``parent_id`` set) once; returns its run id.

        Spawning the same name again (a replay) returns the same child id.
        """
        with self._core.agent.replay.busy():
            return await spawn_child(self._core, name, config, run_id, run_name)

    async def join(self, child_id: str) -> ChildResult:
        """Wait durably until run ``child_id`` is terminal; returns its status and result."""
        with self._core.agent.replay.busy():
            return await join_child(self._core, child_id)

    # -- completion and release ---------------------------------------------------------

    async def complete(self, result: Any = None) -> None:
        """Mark the run completed with an optional JSON result (what a parent's join sees)."""
        await self._core.agent.complete(result)

    async def fail(self, error: str) -> None:
        """Mark the run failed with an error description."""
        await self._core.agent.fail(error)

    async def close(self) -> None:
        """Stop the heartbeat and release the shared lease (the run's status is unchanged)."""
        await self._core.agent.close()

    async def __aenter__(self) -> WorkflowContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<WorkflowContext run={self.run_id!r} token={self.lease_token}>"
