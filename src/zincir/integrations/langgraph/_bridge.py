"""What the savers need around the async store: blocking calls, ordering, lease renewal.

:class:`Blocking` runs a coroutine for a blocking caller. A write runs on the caller's own
thread, on an event loop that thread keeps for its life (closed when the thread ends), so a
sync put commits on its thread like an async one, with no hop to another thread. A read
runs on one of a few long-lived helper threads instead: the store keeps a read connection
per thread that reads, and a caller's short-lived threads would each leave one open. A
thread that already runs an event loop (a notebook, async code calling a sync method) hands
its writes to the helpers too, and blocks its loop meanwhile: async code should await the
``a``-methods instead.

:class:`InFlight` records the puts and writes a saver has begun, so that a checkpoint waits
for the writes of its parent's tasks and writes wait for their own checkpoint.
:class:`LeaseKeeper` renews a thread lease in the background.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ..._errors import StoreError, ZincirError

__all__ = ["Blocking", "InFlight", "LeaseKeeper"]

T = TypeVar("T")
_HELPERS = 4  # helper threads: each keeps one read connection of the store
log = logging.getLogger("zincir.langgraph")


class _LoopHolder:
    """A thread's loop; the thread-local slot holding it dies with the thread."""

    __slots__ = ("__weakref__", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed() and not loop.is_running():
        loop.close()


class Blocking:
    """Runs coroutines to completion for callers that block (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._local = threading.local()
        self._holders: weakref.WeakSet[_LoopHolder] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._helper: ThreadPoolExecutor | None = None
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result, computed on this thread while it waits (a write)."""
        self._check(coro)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop().run_until_complete(coro)
        return self.run_elsewhere(coro)

    def run_elsewhere(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result, computed on a helper thread while this one waits (a
        read: see the module docstring)."""
        self._check(coro)
        with self._lock:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(_HELPERS, thread_name_prefix="zincir-langgraph")
            helper = self._helper
        return helper.submit(self._run_here, coro).result()

    def check_open(self) -> None:
        """Raise StoreError once the saver is closed."""
        if self.closed:
            raise StoreError(f"the {self._name} is closed")

    def _check(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self.closed:
            coro.close()
        self.check_open()

    def _run_here(self, coro: Coroutine[Any, Any, T]) -> T:
        """On the helper thread: run ``coro`` on that thread's own loop."""
        return self._loop().run_until_complete(coro)

    def _loop(self) -> asyncio.AbstractEventLoop:
        holder: _LoopHolder | None = getattr(self._local, "holder", None)
        if holder is None:
            loop = asyncio.new_event_loop()
            holder = _LoopHolder(loop)
            weakref.finalize(holder, _close_loop, loop)
            self._local.holder = holder
            with self._lock:
                self._holders.add(holder)
        return holder.loop

    def close(self) -> None:
        """Close every idle loop and the helper threads; later calls raise StoreError."""
        self.closed = True
        with self._lock:
            helper, self._helper = self._helper, None
            holders = list(self._holders)
        if helper is not None:
            helper.shutdown(wait=True)
        for holder in holders:
            _close_loop(holder.loop)


class _Op:
    """One operation in flight. A blocking waiter waits on its ``gate`` (a lock held until
    the operation ends: one wake, no condition variable), an async one on its ``future``;
    each exists once someone waits that way."""

    __slots__ = ("error", "future", "gate")

    def __init__(self) -> None:
        self.future: Future[None] | None = None
        self.gate: threading.Lock | None = None
        self.error: BaseException | None = None


class InFlight:
    """Operations a saver has begun and not finished, by key; a waiter waits for each
    operation running under a key to end, and gets its error if it failed. An operation
    nobody waits for costs no gate and no future."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, ...], list[_Op]] = {}

    def begin(self, key: tuple[str, ...]) -> _Op:
        """Record an operation under ``key``; report its end with :meth:`end`."""
        op = _Op()
        with self._lock:
            running = self._running.get(key)
            if running is None:
                self._running[key] = [op]
            else:
                running.append(op)
        return op

    def end(self, key: tuple[str, ...], op: _Op, error: BaseException | None) -> None:
        """The operation finished (``error``: it failed); wake whoever waits for it."""
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                if op in running:
                    running.remove(op)
                if not running:
                    del self._running[key]
            op.error = error
            gate, future = op.gate, op.future
        if gate is not None:
            gate.release()
        if future is None:
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def wait_here(self, key: tuple[str, ...]) -> None:
        """Blocking :meth:`wait`."""
        if not self._running:  # nothing in flight: no lock to take
            return
        with self._lock:
            ops = self._running.get(key)
            if not ops:
                return
            ops = list(ops)
            for op in ops:
                if op.gate is None:
                    op.gate = threading.Lock()
                    op.gate.acquire()
        for op in ops:
            gate = op.gate
            assert gate is not None
            gate.acquire()
            gate.release()  # open for the next waiter
            if op.error is not None:
                raise op.error

    async def wait(self, key: tuple[str, ...]) -> None:
        """Wait for the operations running under ``key``; raise the first one's error."""
        if not self._running:  # nothing in flight: no lock to take
            return
        with self._lock:
            futures = []
            for op in self._running.get(key, ()):
                if op.future is None:
                    op.future = Future()
                futures.append(op.future)
        for future in futures:
            await asyncio.wrap_future(future)


class LeaseKeeper:
    """Renews a lease every ``interval`` seconds on a daemon thread until stopped, or until
    a renewal finds the lease superseded (then ``lost`` is set; the store refuses the holder's
    writes anyway). A failed renewal is retried at the next interval."""

    def __init__(
        self,
        blocking: Blocking,
        renew: Callable[[], Coroutine[Any, Any, bool]],
        *,
        interval: float,
        name: str,
    ) -> None:
        self._blocking = blocking
        self._renew = renew
        self._interval = interval
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._beat, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for the thread (at most one renewal in progress)."""
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                renewed = self._blocking.run(self._renew())
            except ZincirError as error:
                if self._blocking.closed:
                    return
                log.warning("%s: renewal failed, retrying: %s", self._thread.name, error)
                continue
            if not renewed:
                self.lost = True
                log.warning("%s: the lease was superseded or released", self._thread.name)
                return
