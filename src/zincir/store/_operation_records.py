"""The typed records of durable operations (the ``operations`` table, one row per identity).

An identity is (run_id, step_id, sequence); its row binds it to one kind, handler and
input digest, is ``claimed`` by one owner while a handler runs, and ``completed`` once it
holds the terminal record (the canonical record JSON the layer above encoded). A claim made
under the run's lease records that lease (owner and token): once the lease no longer holds
the run, the claim is dead at once, whatever its expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = ["NewOperation", "OperationClaim", "OperationKey", "OperationOutcome", "OperationRow"]


@dataclass(frozen=True, slots=True)
class OperationKey:
    """An operation's identity."""

    run_id: str
    step_id: str
    sequence: int


@dataclass(frozen=True, slots=True)
class NewOperation:
    """An identity and what binds it: kind, handler and input (stored with its first write)."""

    key: OperationKey
    kind: str
    handler_id: str
    input_digest: str
    input_json: str

    def binds(self, row: OperationRow) -> bool:
        """Whether ``row`` was stored for this same kind, handler and input."""
        return (row.kind, row.handler_id, row.input_digest) == (
            self.kind,
            self.handler_id,
            self.input_digest,
        )

    def blocked_by(self, row: OperationRow) -> bool:
        """Whether ``row`` keeps this operation's record from being stored: it is completed
        already (its record wins), or bound to other input."""
        return row.status == "completed" or not self.binds(row)

    def claim_blocked_by(self, row: OperationRow, owner_prefix: str, now: datetime) -> bool:
        """Whether ``row`` refuses a claim of this operation at ``now``: :meth:`blocked_by`,
        or claimed live by an owner not starting with ``owner_prefix``."""
        return self.blocked_by(row) or row.held_elsewhere(owner_prefix, now)


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """A terminal record to store: its canonical JSON (or that text with ``null`` for its
    input), its outcome's name, and the details (error and retryable, or reason) its
    ``operation_completed`` event carries."""

    record_json: str
    outcome: Literal["success", "failure", "suspended"]
    details: Mapping[str, Any]
    input_left_out: bool = False
    """``record_json`` holds ``null`` for the invocation's input (the store keeps it once)."""


@dataclass(frozen=True, slots=True)
class OperationRow:
    """One ``operations`` row as stored; ``claim_fenced`` is derived when it is read (the
    claim's lease compared with its run's row at that moment)."""

    kind: str
    handler_id: str
    input_digest: str
    status: Literal["claimed", "completed"]
    record: str | None
    claim_owner: str | None
    claim_expires_at: datetime | None
    attempts: int
    claim_lease_owner: str | None = None
    claim_lease_token: int | None = None
    claim_fenced: bool = False

    def held_elsewhere(self, owner_prefix: str, now: datetime) -> bool:
        """A live claim whose owner does not start with ``owner_prefix``.

        A claim is live until ``claim_expires_at``, unless it is ``claim_fenced``: made under
        a run lease that no longer holds the run (superseded by a newer token, released or
        expired, or the run finished), so its owner can never store the record and the
        run's next owner takes it over at once. A claim made without a lease (no
        ``claim_lease_token``) is never fenced.
        """
        return (
            self.status == "claimed"
            and not self.claim_fenced
            and self.claim_owner is not None
            and not self.claim_owner.startswith(owner_prefix)
            and self.claim_expires_at is not None
            and self.claim_expires_at > now
        )


@dataclass(frozen=True, slots=True)
class OperationClaim:
    """The answer to a claim: ``claimed`` (the row's ``attempts`` is this attempt's number),
    or the row that prevented it (completed, bound to other input, or held elsewhere)."""

    claimed: bool
    row: OperationRow
