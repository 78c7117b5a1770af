"""Replay against the log: the recorded work a run's new owner asks for again.

A run taken over by a new owner replays its code from the start. Its log holds, in order,
the work earlier owners finished: ``step_completed`` (a workflow step, by name) and
``operation_completed`` (an operation run under the run's lease, by step id and sequence).
A :class:`Replay`, one per lease, tracks which of those items this process has asked for:

- a recorded item replays, in whatever order the code asks for it;
- an item the log never recorded, asked for while recorded items remain that nothing asked
  for yet, means the code is not the code that made the log (a renamed step, one added in
  the middle): :class:`VersionDivergence` is raised before anything is claimed or run,
  unless an earlier owner claimed that very operation and never finished it (it was in
  flight at the crash, and work it started, recorded before it, remains to replay);
- once every recorded item was asked for, new items are new work;
- recorded items the code never asks for are not an error: :meth:`Replay.unreplayed` names
  them.

A skipped recorded item followed by an unrecorded one cannot be told from a rename, so it
diverges too; ``patched()`` is how new code drops a step for runs in flight.

Concurrent calls (``asyncio.gather``) ask in their call order, whatever order they finish
in; an unrecorded item is judged only once the calls started with it have asked and the
replays in flight here (steps, operations, workflow sleeps, messages, child runs) have
settled, so a gather that was cut short replays as it ran. Other awaits between two steps
of a concurrent branch (a plain ``asyncio.sleep``, a network call) are invisible here: an
unrecorded item judged meanwhile may be refused. ``patched(id)`` markers (``patch_marker``
events) are not work: they only answer :meth:`Replay.patched`.

The log is read before the lease's first request (when ``WorkflowContext.open`` takes the
run, or from the agent loop's own read), so all it holds then was recorded by earlier
owners; a runtime that records under the lease without this check (a TemporalRuntime used
outside the agent loop) should not run before the first checked request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from ._errors import VersionDivergence
from .store import Event, Lease, OperationKey, Store

__all__ = [
    "PATCH_MARKER",
    "Item",
    "Recorded",
    "Replay",
    "forget",
    "operation_item",
    "register",
    "replay_for",
    "step_item",
]

PATCH_MARKER = "patch_marker"
_PAGE = 2000  # events per read when a takeover reads the log


class Item(NamedTuple):
    """One unit of recorded work: a step by name, or an operation by step id and sequence."""

    kind: str
    name: str
    sequence: int = 0

    def __str__(self) -> str:
        if self.kind == "step":
            return f"step {self.name!r}"
        return f"operation {self.name} #{self.sequence}"


def step_item(name: str) -> Item:
    return Item("step", name)


def operation_item(step_id: str, sequence: int) -> Item:
    return Item("operation", step_id, sequence)


class Recorded:
    """What a run's log holds for replay: its work in log order and its patch markers."""

    __slots__ = ("markers", "order", "position")

    def __init__(self) -> None:
        self.order: list[Item] = []
        self.position: dict[Item, int] = {}
        self.markers: set[str] = set()

    def add(self, event: Event) -> None:
        """Note ``event`` if it is recorded work or a patch marker; ignore it otherwise."""
        payload: Any = event.payload
        if not isinstance(payload, dict):
            return
        if event.type == "step_completed" and isinstance(payload.get("name"), str):
            item = step_item(payload["name"])
        elif (
            event.type == "operation_completed"
            and isinstance(payload.get("step_id"), str)
            and isinstance(payload.get("sequence"), int)
        ):
            item = operation_item(payload["step_id"], payload["sequence"])
        elif event.type == PATCH_MARKER and isinstance(payload.get("id"), str):
            self.markers.add(payload["id"])
            return
        else:
            return
        if item not in self.position:
            self.position[item] = len(self.order)
            self.order.append(item)


class Replay:
    """The recorded work of one lease's run and what this process has asked for of it.

    ``fresh`` (the run's first lease: no earlier owner recorded anything) starts settled
    without reading the log; otherwise the log is read once, by :meth:`seed` with events
    already read, or at the first request.
    """

    def __init__(self, store: Store, run_id: str, *, fresh: bool) -> None:
        self.store = store
        self.run_id = run_id
        self._recorded = Recorded()
        self._loaded = fresh
        self._loading: asyncio.Task[Recorded] | None = None
        self._asked: set[Item] = set()
        self._left = 0  # recorded items nothing has asked for yet
        self._active = 0  # requests and workflow calls in progress, not waiting to be judged
        self._changed: asyncio.Event | None = None
        self._answers: dict[str, bool] = {}
        self._patching: asyncio.Lock | None = None

    @property
    def settled(self) -> bool:
        """True once every recorded item was asked for: every request is new work (the hot
        path's only check)."""
        return self._loaded and not self._left

    # -- the log ------------------------------------------------------------------------

    def seed(self, recorded: Recorded) -> None:
        """Take the recorded work from a log the caller already read (unless known)."""
        if self._loaded:
            return
        self._recorded = recorded
        self._left = sum(1 for item in recorded.order if item not in self._asked)
        self._loaded = True
        self._wake()

    async def load(self) -> None:
        """Read the log once (concurrent callers share the read; a failed one is retried)."""
        if self._loaded:
            return
        loading = self._loading
        if loading is None:
            loading = self._loading = asyncio.ensure_future(self._read())
        try:
            recorded = await asyncio.shield(loading)
        except BaseException:
            if self._loading is loading and loading.done():
                self._loading = None
            raise
        self.seed(recorded)

    async def _read(self) -> Recorded:
        """The log's recorded work, read a page at a time: a long log is never all in memory."""
        recorded = Recorded()
        after = 0
        while True:
            page = await self.store.list_events(self.run_id, after_seq=after, limit=_PAGE)
            for event in page:
                recorded.add(event)
            if len(page) < _PAGE:
                return recorded
            after = page[-1].seq

    # -- requests -----------------------------------------------------------------------

    def request(self, item: Item) -> _Request:
        """Ask for ``item`` now, in call order; ``async with`` the result around its work.

        Entering raises VersionDivergence when ``item`` was never recorded while recorded
        items remain that nothing asked for, once the calls in flight here have settled.
        """
        self._active += 1
        self._ask(item)
        return _Request(self, item)

    def supersede(self, items: Iterable[Item]) -> None:
        """Count recorded ``items`` as replayed: the code skips them by design (an earlier
        decision round of a reopened approval), so they are no divergence."""
        for item in items:
            self._ask(item)

    def _ask(self, item: Item) -> None:
        if item in self._asked:
            return
        self._asked.add(item)
        if self._loaded and item in self._recorded.position:
            self._left -= 1
            if not self._left:
                self._wake()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A workflow call that is not a step (sleep, messages, child runs) is in progress:
        a branch replaying it may ask for recorded work next, so judging waits for it."""
        self._active += 1
        try:
            yield
        finally:
            self._done()

    @property
    def recorded(self) -> list[str]:
        """The recorded items, in log order (after :meth:`load`)."""
        return [str(item) for item in self._recorded.order]

    def unreplayed(self) -> list[str]:
        """The recorded items nothing has asked for yet, in log order (after :meth:`load`)."""
        return [str(item) for item in self._recorded.order if item not in self._asked]

    async def patched(self, patch_id: str, mark: Callable[[], Awaitable[Any]]) -> bool:
        """True when the run reaches this point on code that has ``patch_id`` (``mark``
        records the marker the first time); False on the replay of a run that passed this
        point without it. The answer is kept for the lease, and a replay answers the same."""
        answer = self._answers.get(patch_id)
        if answer is not None:
            return answer
        if self._patching is None:
            self._patching = asyncio.Lock()
        async with self._patching:  # a call waiting here is not progress: it is not busy
            answer = self._answers.get(patch_id)
            if answer is None:
                await self.load()
                answer = patch_id in self._recorded.markers
                if not answer:
                    with self.busy():
                        left = await self._left_after_settling()
                    if not left:
                        await mark()
                        self._recorded.markers.add(patch_id)
                        answer = True
                self._answers[patch_id] = answer
        return answer

    async def _judge(self, item: Item) -> None:
        """``item`` is not recorded: new work once every recorded item was asked for, else
        VersionDivergence."""
        if not await self._left_after_settling():
            return
        if await self._was_in_flight(item):
            return
        first = next(known for known in self._recorded.order if known not in self._asked)
        raise VersionDivergence(
            run_id=self.run_id,
            position=self._recorded.position[first],
            recorded=str(first),
            attempted=str(item),
        )

    async def _was_in_flight(self, item: Item) -> bool:
        """Whether ``item`` is an operation an earlier owner claimed and never finished: the
        same work asked for again (a tool call cut off after an operation it started, such
        as ``deliver_event``, was recorded), not new code."""
        if item.kind != "operation":
            return False
        row = await self.store.get_operation(OperationKey(self.run_id, item.name, item.sequence))
        return row is not None and row.status == "claimed"

    async def _left_after_settling(self) -> int:
        """How many recorded items remain unasked once the calls started with this one
        have asked and the calls in progress here have finished or asked in turn.

        The caller counts as active; it does not while it waits here."""
        if not self._left:
            return 0
        self._done()
        try:
            await asyncio.sleep(0)  # calls started together (a gather) ask before judging
            while self._left and self._active:
                if self._changed is None:
                    self._changed = asyncio.Event()
                await self._changed.wait()
        finally:
            self._active += 1
        return self._left

    def _done(self) -> None:
        self._active -= 1
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()


class _Request:
    """One request's time in progress; entering judges it, leaving ends it."""

    __slots__ = ("item", "replay")

    def __init__(self, replay: Replay, item: Item) -> None:
        self.replay = replay
        self.item = item

    async def __aenter__(self) -> None:
        replay = self.replay
        try:
            if not replay._loaded:
                await replay.load()
            if replay._left and self.item not in replay._recorded.position:
                await replay._judge(self.item)
        except BaseException:
            replay._done()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.replay._done()


_BY_LEASE: dict[tuple[str, str, int], Replay] = {}


def replay_for(lease: Lease) -> Replay | None:
    """The Replay of the context of this process holding ``lease``, if it is registered."""
    return _BY_LEASE.get((lease.run_id, lease.owner, lease.token))


def register(lease: Lease, replay: Replay) -> None:
    """A context of this process holds ``lease``: its operations are checked by ``replay``."""
    _BY_LEASE[(lease.run_id, lease.owner, lease.token)] = replay


def forget(lease: Lease) -> None:
    """The context holding ``lease`` stopped."""
    _BY_LEASE.pop((lease.run_id, lease.owner, lease.token), None)
