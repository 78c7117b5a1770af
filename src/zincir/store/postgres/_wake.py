"""LISTEN/NOTIFY wake-ups: one listening connection per store, shared by every waiter.

Triggers (migration 0002) notify channel ``zincir_`` + 16 hex digits of the schema's MD5 at
COMMIT with the run id to
wake. A daemon thread started by the first waiter holds a ``LISTEN`` connection and sets the
waiters' events; when the connection breaks it reconnects, and waiters fall back to their
poll interval meanwhile. A notification is a hint to look again, never a result.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["Listener"]

_ANY = ""  # the key of waiters that want every notification (ResumeWorkers)
_RECONNECT_DELAY = 0.5


class Listener:
    """Waiters keyed by run id, woken by the notifications of one channel."""

    def __init__(self, conninfo: str, connect_kwargs: dict[str, Any], schema: str) -> None:
        self._conninfo = conninfo
        self._connect_kwargs = connect_kwargs
        self._channel = "zincir_" + hashlib.md5(schema.encode()).hexdigest()[:16]
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._closed = False

    async def wait(self, run_id: str | None, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification about ``run_id`` (None: any
        run); True if one came."""
        self._start()
        key = _ANY if run_id is None else run_id
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(key, set()).add(entry)
        try:
            await asyncio.wait_for(entry[1].wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(entry)
                    if not waiting:
                        del self._waiters[key]

    def listening(self, timeout: float) -> bool:
        """Block until the LISTEN is in place (tests: a notification sent now is seen)."""
        self._start()
        return self._listening.wait(timeout)

    def close(self) -> None:
        self._closed = True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._listen, name="zincir-postgres-listen", daemon=True
                )
                self._thread.start()

    def _listen(self) -> None:
        while not self._closed:
            try:
                with psycopg.connect(self._conninfo, **self._connect_kwargs) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._listening.set()
                    while not self._closed:
                        for notice in conn.notifies(timeout=0.5):
                            self._wake(notice.payload)
            except psycopg.Error:
                self._listening.clear()
                time.sleep(_RECONNECT_DELAY)

    def _wake(self, run_id: str) -> None:
        with self._lock:
            entries = [*self._waiters.get(run_id, ()), *self._waiters.get(_ANY, ())]
        for loop, event in entries:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)
