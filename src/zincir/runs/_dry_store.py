"""A Store that replays one run's log and refuses every write: the dry mode of
``zincir check-compat``.

:class:`DryStore` wraps a store it only reads. The operations the store marks as reads
(``store.READS``) pass through; every other operation raises :class:`ReplayStopped`, a
BaseException user code cannot swallow, before it writes. The run it checks is "taken over"
under a lease that is never written, and the few writes a replay answers from its log are
answered here: a completed step's result, a fired timer, a recorded send or spawn, a
finished child. Which recorded work the code asks for, and whether an unrecorded item is a
divergence or new work, is judged by the context's own replay (``zincir._replay``), as in a
real takeover: an unrecorded step or operation that reaches this store is new work.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import RunExists
from .._replay import operation_item, step_item
from ..store import Event, Lease, NewOperation, StepClaim, Store, WaitAttempt
from ..store._protocol import READS

__all__ = ["DryStore", "ReplayStopped"]


class ReplayStopped(BaseException):
    """The dry replay reached something the log does not hold: ``what`` it would do."""

    def __init__(self, what: str, *, new_work: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.new_work = new_work


_WHAT: Mapping[str, str] = {
    "wait_for_wake": "waits for a wake-up",
    "cancel_run": "cancels run {run_id!r}",
    "append_events": "appends events",
    "set_run_wait": "waits on {kind} {ref!r}",
    "record_response": "records a model response",
    "record_tool_result": "records the result of tool call {call_id!r}",
    "finish_step": "stores the result of step {name!r}",
    "finish_step_and_claim": "stores the result of step {name!r}",
    "send_message": "sends {topic!r} to run {to_run_id!r}",
    "receive_attempt": "receives a message on {topic!r}",
    "open_approvals": "pauses for approvals",
    "decide_approval": "decides approval {approval_id!r}",
    "save_restart_checkpoint": "saves restart checkpoint {checkpoint_id!r}",
}
"""What a refused write would do, in words, from its arguments (others: its name)."""


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if name == "finish_run":
        status = kwargs.get("status", args[1] if len(args) > 1 else "")
        return "completes the run" if status == "completed" else f"marks it {status}"
    bound = inspect.signature(getattr(Store, name)).bind_partial(None, *args, **kwargs)
    template = _WHAT.get(name)
    if template is None:
        return name.replace("_", " ")
    return template.format_map(bound.arguments)


def _refused(name: str) -> Callable[..., Any]:
    async def refuse(self: DryStore, *args: Any, **kwargs: Any) -> Any:
        raise ReplayStopped(_describe(name, args, kwargs))

    refuse.__name__ = name
    return refuse


def _passed(name: str) -> Callable[..., Any]:
    async def pass_through(self: DryStore, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    pass_through.__name__ = name
    return pass_through


class DryStore:
    """Replays the run of ``lease`` from ``inner`` (only read) and refuses every write."""

    def __init__(
        self,
        inner: Store,
        lease: Lease,
        events: Sequence[Event],
        steps: Mapping[str, Any],
        path: str,
    ) -> None:
        self.inner = inner
        self.lease = lease
        self.backend = inner.backend
        self.path = path  # the database checked (on SQLite ``inner`` reads a copy)
        self.clock = inner.clock
        self._steps = dict(steps)
        self._sends: dict[str, int] = {}
        self._spawns: dict[str, str] = {}
        for event in events:
            payload = event.payload if isinstance(event.payload, dict) else {}
            if event.type == "message_sent":
                self._sends[str(payload.get("key"))] = int(payload["message_id"])
            elif event.type == "child_spawned":
                self._spawns[str(payload.get("name"))] = str(payload.get("child_id"))
        self._held: dict[str, Lease] = {}

    def now(self) -> Any:
        return self.inner.now()

    async def close(self) -> None:
        """Nothing to close: the caller owns the store it wraps."""

    def hold_lease(self, lease: Lease) -> None:
        self._held[lease.run_id] = lease

    def drop_lease(self, lease: Lease) -> None:
        if self._held.get(lease.run_id) == lease:
            del self._held[lease.run_id]

    def lease_for(self, run_id: str) -> Lease | None:
        return self._held.get(run_id)

    # -- the writes a replay answers from the log ----------------------------------------

    async def create_run(self, run_id: str, **kwargs: Any) -> Lease:
        if run_id == self.lease.run_id:
            raise RunExists("a run with this id already exists", run_id=run_id)
        raise ReplayStopped(f"creates run {run_id!r}")

    async def open_run(self, run_id: str, **kwargs: Any) -> Lease:
        if run_id == self.lease.run_id:
            return self.lease
        raise ReplayStopped(f"opens run {run_id!r}")

    async def acquire_run(self, run_id: str, **kwargs: Any) -> Lease:
        if run_id == self.lease.run_id:
            return self.lease
        raise ReplayStopped(f"takes over run {run_id!r}")

    async def renew_lease(self, lease: Lease) -> bool:
        return lease == self.lease

    async def release_lease(self, lease: Lease) -> bool:
        return lease == self.lease  # nothing is written: the run's real lease is untouched

    async def claim_step(self, lease: Lease, name: str) -> StepClaim:
        if name in self._steps:
            return StepClaim("completed", self._steps[name])
        raise ReplayStopped(str(step_item(name)), new_work=True)

    async def claim_operation(self, operation: NewOperation, **kwargs: Any) -> Any:
        key = operation.key
        item = str(operation_item(key.step_id, key.sequence))
        if key.run_id == self.lease.run_id:
            raise ReplayStopped(item, new_work=True)
        raise ReplayStopped(f"runs {item} of run {key.run_id!r}")

    async def _unclaimed(self, *args: Any, **kwargs: Any) -> bool:
        return False  # nothing was claimed: nothing to renew or release

    renew_operation_claim = release_operation_claim = abandon_step = _unclaimed

    async def sleep_attempt(self, lease: Lease, name: str, duration: Any) -> WaitAttempt[None]:
        timer = await self.inner.get_timer(lease.run_id, name)
        if timer is not None and timer.completed:
            return WaitAttempt(True, None, timer.wake_at)
        raise ReplayStopped(f"sleeps on timer {name!r}")

    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int:
        sent = self._sends.get(send_key)
        if sent is not None:
            return sent
        raise ReplayStopped(f"sends {topic!r} to run {to_run_id!r}")

    async def spawn_child(self, lease: Lease, spawn_name: str, **kwargs: Any) -> str:
        spawned = self._spawns.get(spawn_name)
        if spawned is not None:
            return spawned
        raise ReplayStopped(f"spawns child {spawn_name!r}")

    async def join_attempt(self, lease: Lease, child_id: str) -> Any:
        outcome = await self.inner.child_outcome(lease.run_id, child_id)
        if outcome.child.status in ("completed", "failed", "cancelled"):
            return WaitAttempt(True, outcome.child)
        raise ReplayStopped(f"waits for child run {child_id!r}")


for _name, _member in inspect.getmembers(Store, inspect.iscoroutinefunction):
    if _name.startswith("_") or _name in vars(DryStore):
        continue
    setattr(DryStore, _name, _passed(_name) if _name in READS else _refused(_name))
