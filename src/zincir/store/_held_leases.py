"""The leases the contexts of this process hold, by run id: a store's record of them."""

from __future__ import annotations

from ._records import Lease

__all__ = ["HeldLeases"]


class HeldLeases:
    """A store's leases held by this process (each backend's ``__init__`` sets ``_leases``):
    writes made for such a run without a context (a LocalRuntime's records) are fenced by
    its lease; SQLite also group-commits every write while more than one is held."""

    _leases: dict[str, Lease]

    def hold_lease(self, lease: Lease) -> None:
        """A context of this process holds ``lease`` (its heartbeat started)."""
        self._leases[lease.run_id] = lease

    def drop_lease(self, lease: Lease) -> None:
        """The context holding ``lease`` stopped."""
        if self._leases.get(lease.run_id) is lease:
            del self._leases[lease.run_id]

    def lease_for(self, run_id: str) -> Lease | None:
        """The lease a context of this process holds on ``run_id``, if any."""
        return self._leases.get(run_id)
