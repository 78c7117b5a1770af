"""Leases: the heartbeat that keeps a lease alive.

A lease is (owner, token, expiry) on the run's row. Acquiring it bumps the token; every
write the store makes for the run re-checks owner and token inside its own transaction,
so a fenced owner's write is rejected and nothing of it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .. import _deadlines as deadlines
from .._crash import crash_point
from .._errors import LeaseLost, RunCancelled, StoreError, ZincirError
from .._validate import MIN_LEASE_TTL
from ..store import Lease, Store

__all__ = [
    "MIN_LEASE_TTL",
    "Heartbeat",
    "Lease",
]

log = logging.getLogger("zincir.lease")


class Heartbeat:
    """Renews a lease every ttl/3 in the background; remembers why it stopped, if it failed."""

    def __init__(self, store: Store, lease: Lease) -> None:
        self._store = store
        self._lease = lease
        self.failure: ZincirError | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        deadlines.extend(self._lease, time.monotonic())
        self._task = asyncio.get_running_loop().create_task(
            self._beat(), name=f"zincir-heartbeat:{self._lease.run_id}"
        )
        self._store.hold_lease(self._lease)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            self._store.drop_lease(self._lease)
            deadlines.forget(self._lease)
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def check(self) -> None:
        """Raise LeaseLost if a renewal failed or the lease lapsed unrenewed (RunCancelled
        once the run was cancelled); called before every write and before a step body
        starts."""
        if self.failure is None and self._task is not None:
            self.failure = deadlines.lapsed(self._lease)
        if self.failure is not None:
            raise self.failure

    async def _beat(self) -> None:
        lease = self._lease
        interval = lease.ttl.total_seconds() / 3
        while True:
            await asyncio.sleep(interval)
            crash_point("lease.before_renew")
            renewing_at = time.monotonic()
            try:
                renewed = await self._store.renew_lease(lease)
            except StoreError as error:
                self.failure = LeaseLost(
                    f"lease renewal failed ({error.detail}); recover the run before writing again",
                    run_id=lease.run_id,
                )
                log.warning("%s", self.failure)
                return
            crash_point("lease.after_renew")
            if renewed:
                deadlines.extend(lease, renewing_at)
            if not renewed:
                self.failure = await self._why_lost()
                log.warning("%s", self.failure)
                return

    async def _why_lost(self) -> ZincirError:
        """RunCancelled when the run was cancelled, else LeaseLost."""
        run_id = self._lease.run_id
        try:
            row = await self._store.get_run(run_id)
        except StoreError:
            row = None
        if row is not None and row["status"] == "cancelled":
            return RunCancelled(
                "the run was cancelled; this context must stop writing", run_id=run_id
            )
        return LeaseLost(
            "the lease was taken over or released; this context must stop writing",
            run_id=run_id,
        )
