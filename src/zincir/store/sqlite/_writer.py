"""The single writer of a SQLite store: group commit of every caller's transaction function.

Callers hand a transaction function to :meth:`Writer.run` and await it. Every caller that
submits during one pass of its event loop joins one batch. A batch, with the writer idle,
commits on the caller's thread (a thread hop costs more than a ``synchronous=NORMAL``
commit); otherwise the writer thread drains every queued batch into one
``BEGIN IMMEDIATE … COMMIT``. The batch first runs every function back to back with no
SAVEPOINT; only if one raises is the batch rolled back and run again with each function
inside its own SAVEPOINT, so that the error reaches only its caller and undoes only its
work. Every await resolves after the commit.

Hence the write contract: a transaction function may run more than once (the re-run after
another caller's error, or a re-queue when the inline ``BEGIN``/``COMMIT`` finds the
database busy) and must touch nothing but the connection it is given; only the effects
of its last run are committed.

The inline path never waits for a lock: if another process holds the database, the batch
goes to the writer thread, which retries within the busy timeout.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from typing import Any, TypeVar, cast

import apsw

from ..._crash import crash_point
from ..._errors import StoreError, StoreUnavailable, ZincirError
from ._errors import DRIVER_ERRORS, commit_failed, translate

__all__ = ["WriteFn", "Writer", "WriterStats", "read_transaction"]

T = TypeVar("T")
_MAX_SOLO_RUN = 0.001  # seconds a solo caller may commit inline without yielding
WriteFn = Callable[[apsw.Connection], T]


class _Job:
    __slots__ = ("fn", "future", "loop", "durable", "result", "error")

    def __init__(
        self,
        fn: Callable[[apsw.Connection], Any],
        future: asyncio.Future[Any] | ThreadFuture[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
        durable: bool = True,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.durable = durable
        self.result: Any = None
        self.error: BaseException | None = None


class WriterStats:
    """Counters for tests and benchmarks: how writes were committed."""

    __slots__ = ("inline_commits", "batch_commits", "batched_jobs", "largest_batch")

    def __init__(self) -> None:
        self.inline_commits = 0
        self.batch_commits = 0
        self.batched_jobs = 0
        self.largest_batch = 0


class _LoopBatch:
    """Jobs submitted on one event loop since its last flush."""

    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: list[_Job] = []


class Writer:
    """Owns the write connection; runs transaction functions in group-committed batches."""

    def __init__(
        self, connection: apsw.Connection, *, busy_timeout: float, path: str, full_sync: bool
    ) -> None:
        self._conn = connection
        self._full_sync = full_sync
        self._synced_now = full_sync
        self._busy_timeout = busy_timeout
        self._path = path
        self._conn_lock = threading.Lock()
        self._queue: deque[list[_Job]] = deque()
        self._wakeup = threading.Condition(threading.Lock())
        self._batches: dict[asyncio.AbstractEventLoop, _LoopBatch] = {}
        self._closed = False
        self._last_yield = 0.0
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._serve, name="zincir-writer", daemon=True)
        self._thread.start()

    async def run(
        self, fn: Callable[[apsw.Connection], T], *, solo: bool = False, durable: bool = True
    ) -> T:
        """Run ``fn`` in a write transaction and return its result once committed.

        ``solo`` says the caller is the process's only active writer: with nothing queued it
        commits at once on this thread, yielding to the event loop at least every
        millisecond so that a tight loop of writes cannot starve other tasks.
        ``durable=False`` lets a batch holding only such jobs commit without fsync (still
        safe against a process crash, not against power loss).
        """
        if self._closed:
            raise StoreError(f"the store at {self._path} is closed")
        if solo and not self._batches and not self._queue and self._conn_lock.acquire(False):
            job = _Job(fn, None, None, durable)
            try:
                done = self._try_inline([job])
            finally:
                self._conn_lock.release()
            if done:
                now = time.monotonic()
                if now - self._last_yield > _MAX_SOLO_RUN:
                    self._last_yield = now
                    await asyncio.sleep(0)
                if job.error is not None:
                    raise job.error
                return cast(T, job.result)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        batch = self._batches.get(loop)
        if batch is None:
            batch = self._batches[loop] = _LoopBatch()
            loop.call_soon(self._flush, loop)
        batch.jobs.append(_Job(fn, future, loop, durable))
        return await future

    def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn`` in a read transaction on the write connection, between commits (a
        store in exclusive locking mode has no other connection)."""
        if self._closed:
            raise StoreError(f"the store at {self._path} is closed")
        with self._conn_lock:
            return read_transaction(self._conn, fn, self._path)

    def run_here(self, fn: Callable[[apsw.Connection], T], *, durable: bool = True) -> T:
        """Run ``fn`` in a write transaction on the calling thread (a blocking caller: no
        event loop, no hand-off) and return its result once committed; waits while another
        thread commits, and out another process's lock within the busy timeout."""
        job = _Job(fn, None, None, durable)
        with self._conn_lock:
            if self._closed:
                raise StoreError(f"the store at {self._path} is closed")
            self._commit([job], wait=True, inline=True)
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def run_alone(self, statement: str, params: Any, *, durable: bool = True) -> bool | None:
        """Run one writing statement on the calling thread in autocommit (its own
        transaction, committed as it ends): whether it changed a row, or None, with nothing
        written, if the database was busy (the caller then runs a transaction that waits)."""
        with self._conn_lock:
            if self._closed:
                raise StoreError(f"the store at {self._path} is closed")
            conn = self._conn
            self._set_sync(durable)
            crash_point("store.before_begin")
            try:
                conn.execute(statement, params)
            except (apsw.BusyError, apsw.LockedError):
                return None
            except apsw.Error as error:
                _safe_rollback(conn)
                raise commit_failed(error, self._path) from None
            crash_point("store.after_commit")
            self.stats.inline_commits += 1
            return conn.changes() > 0

    def run_sync(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Blocking variant for threads without an event loop."""
        if self._closed:
            raise StoreError(f"the store at {self._path} is closed")
        future: ThreadFuture[T] = ThreadFuture()
        self._enqueue([_Job(fn, future, None)])
        return future.result()

    def close(self) -> None:
        """Finish queued work, stop the thread and close the connection."""
        if self._closed:
            return
        self._closed = True
        with self._wakeup:
            self._wakeup.notify()
        self._thread.join()
        with self._conn_lock:
            try:
                self._conn.close()
            except DRIVER_ERRORS as error:
                raise StoreUnavailable(
                    f"closing {self._path} failed ({error}); every committed write stays in "
                    "its WAL file and is recovered when the database is next opened"
                ) from None

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._batches.pop(loop)
        jobs = batch.jobs
        if self._closed:  # closed between the submit and this pass of the loop
            error = StoreError(f"the store at {self._path} was closed before this write ran")
            for job in jobs:
                _settle(job.future, None, error)
            return
        if not self._queue and self._conn_lock.acquire(blocking=False):
            try:
                done = self._try_inline(jobs)
            finally:
                self._conn_lock.release()
            if done:
                _settle_all(jobs)
                return
        self._enqueue(jobs)

    def _try_inline(self, jobs: list[_Job]) -> bool:
        """Commit ``jobs`` on the caller's thread; False if the database is busy (hand over)."""
        return self._commit(jobs, wait=False)

    def _enqueue(self, jobs: list[_Job]) -> None:
        with self._wakeup:
            if self._closed and not self._thread.is_alive():
                error = StoreError(f"the store at {self._path} is closed")
                for job in jobs:
                    _settle_from_thread(job, None, error)
                return
            self._queue.append(jobs)
            self._wakeup.notify()

    def _serve(self) -> None:
        while True:
            with self._wakeup:
                while not self._queue and not self._closed:
                    self._wakeup.wait()
                if not self._queue and self._closed:
                    return
                jobs = [job for batch in self._queue for job in batch]
                self._queue.clear()
            with self._conn_lock:
                self._commit(jobs, wait=True)
            _deliver(jobs)

    def _set_sync(self, durable: bool) -> None:
        """Commit with fsync unless the store is FULL and nothing in the batch needs it."""
        wanted = self._full_sync and durable
        if wanted != self._synced_now:
            self._conn.execute("PRAGMA synchronous=FULL" if wanted else "PRAGMA synchronous=NORMAL")
            self._synced_now = wanted

    def _commit(self, jobs: list[_Job], *, wait: bool, inline: bool = False) -> bool:
        """Run ``jobs`` in one transaction and commit it, settling each job's result or error.

        With ``wait`` the writer thread waits out another process's lock (within the busy
        timeout); without it a busy database returns False with nothing committed and every
        job cleared, to be handed to the writer thread. ``inline``: counted as committed on
        the caller's thread.
        """
        conn = self._conn
        committing = False  # an I/O error at COMMIT leaves the write's fate unknown
        self._set_sync(jobs[0].durable if len(jobs) == 1 else any(job.durable for job in jobs))
        try:
            crash_point("store.before_begin")
            if not self._begin(wait):
                return False
            crash_point("store.after_begin")
            if not self._run_optimistic(jobs):
                if len(jobs) == 1:
                    return True  # its error is set and nothing is left to commit
                if not self._begin(wait):
                    _clear(jobs)
                    return False
                self._run_isolated(jobs)
            crash_point("store.after_statements")
            committing = True
            if not self._end(wait):
                _safe_rollback(conn)
                _clear(jobs)
                return False
            crash_point("store.after_commit")
        except ZincirError as error:
            _safe_rollback(conn)
            for job in jobs:
                job.result, job.error = None, error
            return True
        except apsw.Error as error:
            _safe_rollback(conn)
            failure = (commit_failed if committing else translate)(error, self._path)
            for job in jobs:
                job.result, job.error = None, failure
            return True
        stats = self.stats
        if wait and not inline:
            stats.batch_commits += 1
        else:
            stats.inline_commits += 1
        if len(jobs) > 1:
            stats.batched_jobs += len(jobs)
            stats.largest_batch = max(stats.largest_batch, len(jobs))
        return True

    def _begin(self, wait: bool) -> bool:
        if wait:
            self._begin_waiting()
            return True
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except apsw.BusyError:
            return False
        return True

    def _end(self, wait: bool) -> bool:
        if wait:
            self._commit_waiting()
            return True
        try:
            self._conn.execute("COMMIT")
        except apsw.BusyError:
            return False
        return True

    def _run_optimistic(self, jobs: list[_Job]) -> bool:
        """Run every job in the open transaction; on the first error roll it all back.

        Errors are rare (a fenced owner, a duplicate id), so the common batch pays no
        SAVEPOINT per job. Job functions only touch the database, so running them again
        after the rollback is safe.
        """
        conn = self._conn
        for job in jobs:
            try:
                job.result = job.fn(conn)
            except BaseException as error:
                job.error = self._own(error)
                _safe_rollback(conn)
                return False
        return True

    def _run_isolated(self, jobs: list[_Job]) -> None:
        """Run each job in its own SAVEPOINT so an error undoes only that job's work."""
        conn = self._conn
        for job in jobs:
            job.result, job.error = None, None
            conn.execute("SAVEPOINT zincir_job")
            try:
                job.result = job.fn(conn)
            except BaseException as error:
                job.error = self._own(error)
                conn.execute("ROLLBACK TO zincir_job")
            conn.execute("RELEASE zincir_job")

    def _own(self, error: BaseException) -> BaseException:
        """A transaction function's error as its caller sees it: driver errors translated."""
        if isinstance(error, DRIVER_ERRORS):
            return translate(error, self._path)
        return error

    def _begin_waiting(self) -> None:
        """BEGIN IMMEDIATE, retrying within the busy timeout while another process writes."""
        deadline = time.monotonic() + self._busy_timeout
        attempt = 0
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise StoreUnavailable(
                        f"the database {self._path} stayed locked by another writer for "
                        f"{self._busy_timeout:g}s; nothing was written: try again, raise "
                        "busy_timeout or find the stuck process"
                    ) from None
            except apsw.Error as error:
                raise translate(error, self._path) from None
            attempt += 1
            time.sleep(min(0.0002 * (2 ** min(attempt, 6)), 0.01) * (0.5 + random.random()))

    def _commit_waiting(self) -> None:
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                self._conn.execute("COMMIT")
                return
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.001)


def read_transaction(conn: apsw.Connection, fn: Callable[[apsw.Connection], T], path: str) -> T:
    """``fn(conn)`` in one read snapshot of the database at ``path``; driver errors translated."""
    try:
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")
    except DRIVER_ERRORS as error:
        raise translate(error, path) from None


def _safe_rollback(conn: apsw.Connection) -> None:
    try:
        if not conn.getautocommit():
            conn.execute("ROLLBACK")
    except apsw.Error:
        pass


def _clear(jobs: list[_Job]) -> None:
    for job in jobs:
        job.result, job.error = None, None


def _settle(
    future: asyncio.Future[Any] | ThreadFuture[Any] | None, result: Any, error: BaseException | None
) -> None:
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _settle_from_thread(job: _Job, result: Any, error: BaseException | None) -> None:
    if job.loop is None:
        _settle(job.future, result, error)
    else:
        job.loop.call_soon_threadsafe(_settle, job.future, result, error)


def _deliver(jobs: list[_Job]) -> None:
    """Resolve every job's future: one wake-up per event loop, not one per job."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
    for job in jobs:
        if job.loop is None:
            _settle(job.future, job.result, job.error)
        else:
            by_loop.setdefault(job.loop, []).append(job)
    for loop, loop_jobs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, loop_jobs)
        except RuntimeError:
            pass  # the caller's loop is closed; nobody awaits these futures any more


def _settle_all(jobs: list[_Job]) -> None:
    for job in jobs:
        _settle(job.future, job.result, job.error)
