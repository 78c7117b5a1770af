"""Pauses kept outside the process: the restart checkpoint of a ``PausedRun``, and the
decisions people recorded on a durable run's approvals."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from .._errors import InvalidDocument, InvalidInput
from .._validate import check_id
from ..contract.payloads import ApprovalDecision
from ..restart._protocol import RestartStore
from ..store import ApprovalRow
from ._approval import PAUSED_CHECKPOINT, PausedRun
from ._loop import Proposal

__all__ = ["load_paused", "recorded_decisions"]


async def load_paused(store: RestartStore, run_id: str) -> PausedRun:
    """The pause saved for ``run_id``; InvalidInput when none was saved."""
    if not isinstance(store, RestartStore):
        raise InvalidInput(
            "store must be a zincir.restart store (FileRestartStore, SQLRestartStore)"
        )
    check_id(run_id, "a run id")
    saved = await store.load(run_id, PAUSED_CHECKPOINT)
    if saved is None:
        raise InvalidInput(
            "no paused run is saved for this run; save it with PausedRun.save_checkpoint",
            run_id=run_id,
        )
    try:
        return PausedRun.from_dict(saved.payload)
    except InvalidDocument as error:
        raise InvalidDocument(
            f"the saved pause is not a paused run: {error.detail}", run_id=run_id
        ) from None


def recorded_decisions(rows: Iterable[ApprovalRow], now: datetime) -> dict[str, Proposal]:
    """The decision per call id that people recorded (``decide``); an approval that
    expired undecided denies its call."""
    decided: dict[str, Proposal] = {}
    for row in rows:
        if row.decision_json is not None:
            document = ApprovalDecision.from_json(row.decision_json)
        elif row.expires_at is not None and row.expires_at <= now:
            document = ApprovalDecision(
                decision="deny",
                reason=f"the approval expired at {row.expires_at.isoformat()} without a decision",
            )
        else:
            continue
        decided[row.call_id] = Proposal(document, row.args_sha256)
    return decided
