"""The read-only view of a zincir database, whatever its backend (the inspector, ``zincir runs``).

A view never creates, migrates or writes its database: :class:`ReadOnlyView` is what the
inspector and the read commands hold, :class:`ReadOnlySnapshot` the named queries of one
consistent read, returning the same typed rows on every backend. :func:`open_read_only`
picks the backend from the location (a SQLite path, ``sqlite:///PATH`` or a
``postgresql://`` URL) and imports the PostgreSQL driver only for a PostgreSQL URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from .._encryption import Encryption
from .._errors import InvalidInput
from ._forks import RunOrigin
from ._queue_reads import QueueEntry, QueuePlace, ScheduleRow
from ._queues import QueueDepth
from ._readonly_rows import (
    CheckpointRow,
    EventRow,
    MessageRow,
    OperationOutcomeRow,
    OperationRow,
    OperationSummaryRow,
    PendingToolRow,
    RestartCheckpointRow,
    StepRow,
    TimerRow,
    Usage,
    decode_json,
    row_limit,
)
from ._records import RunRecord
from ._streams import StreamItemRow
from ._thread_rows import (
    PREVIEW_BYTES,
    ThreadCheckpointRow,
    ThreadHeadRow,
    ThreadRow,
    ThreadWriteRow,
)
from .sqlite import ReadOnlyDatabase, sqlite_path_from_url

__all__ = [
    "POSTGRES_SCHEMES",
    "PREVIEW_BYTES",
    "CheckpointRow",
    "EventRow",
    "MessageRow",
    "OperationOutcomeRow",
    "OperationRow",
    "OperationSummaryRow",
    "PendingToolRow",
    "ReadOnlySnapshot",
    "ReadOnlyView",
    "RestartCheckpointRow",
    "StepRow",
    "ThreadCheckpointRow",
    "ThreadHeadRow",
    "ThreadRow",
    "ThreadWriteRow",
    "TimerRow",
    "Usage",
    "decode_json",
    "open_read_only",
    "row_limit",
]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class ReadOnlySnapshot(Protocol):
    """The named read queries inside one consistent read transaction."""

    @property
    def path(self) -> str:
        """The database being read, printable (a file path, or a URL without password)."""
        ...

    @property
    def sealed(self) -> bool:
        """Whether the store is encrypted and read without its keys (payloads read as
        ``‹sealed›``)."""
        ...

    # -- runs and their logs ------------------------------------------------------------

    def list_runs(
        self,
        status: str | None = None,
        limit: int = 100,
        *,
        app_version: str | None = None,
        stuck_before: datetime | None = None,
    ) -> list[RunRecord]: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def children(self, run_id: str, limit: int = 500) -> list[RunRecord]: ...
    def events(self, run_id: str, after_seq: int = 0, limit: int = 200) -> list[EventRow]: ...
    def iter_events(
        self, run_id: str, after_seq: int = 0, *, page_size: int = 1000
    ) -> Iterator[EventRow]: ...
    def answered(self, run_id: str, call_ids: Sequence[str]) -> set[str]: ...
    def arrived(self, runs: Sequence[RunRecord]) -> set[str]: ...
    def tool_intents(self, run_id: str, call_ids: Sequence[str]) -> list[EventRow]: ...
    def result_seqs(self, run_id: str, call_ids: Sequence[str]) -> dict[str, int]: ...
    def pending_tools(self, run_id: str, limit: int = 500) -> list[PendingToolRow]: ...
    def usage(self, run: RunRecord) -> Usage: ...

    # -- durable state ------------------------------------------------------------------

    def checkpoints(self, run_id: str, limit: int = 500) -> list[CheckpointRow]: ...
    def restart_checkpoints(self, run_id: str, limit: int = 500) -> list[RestartCheckpointRow]: ...
    def operations(self, run_id: str, limit: int = 500) -> list[OperationRow]: ...
    def operation_outcomes(
        self, run_id: str, keys: Sequence[tuple[str, int]]
    ) -> list[OperationOutcomeRow]: ...
    def first_model_request(
        self, run_id: str, step_id: str | None = None
    ) -> OperationRow | None: ...
    def steps(self, run_id: str, limit: int = 500) -> list[StepRow]: ...
    def timers(self, run_id: str, limit: int = 500) -> list[TimerRow]: ...
    def messages(self, run_id: str, limit: int = 500) -> list[MessageRow]: ...

    # -- bounded reads of a long run: a page of events or operations, one operation whole

    def events_before(self, run_id: str, before_seq: int, limit: int = 200) -> list[EventRow]: ...
    def operation_page(
        self, run_id: str, offset: int = 0, limit: int = 50
    ) -> list[OperationSummaryRow]: ...
    def failed_operations(
        self, run_id: str, kind: str, limit: int = 500
    ) -> list[OperationOutcomeRow]: ...
    def operation(self, run_id: str, step_id: str, sequence: int) -> OperationRow | None: ...

    # -- LangGraph threads --------------------------------------------------------------

    def threads(self, limit: int = 100) -> list[ThreadRow]: ...
    def thread(self, thread_id: str) -> ThreadRow | None: ...
    def thread_checkpoints(self, thread_id: str, limit: int = 500) -> list[ThreadCheckpointRow]: ...
    def thread_heads(
        self, thread_id: str, limit: int = 50, *, preview_bytes: int = PREVIEW_BYTES
    ) -> list[ThreadHeadRow]: ...
    def thread_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        limit: int = 500,
        *,
        preview_bytes: int = PREVIEW_BYTES,
    ) -> list[ThreadWriteRow]: ...

    # -- a run's durable stream ---------------------------------------------------------

    def read_stream(self, run_id: str, after: int = 0, limit: int = 500) -> list[StreamItemRow]: ...
    def stream_tail(self, run_id: str) -> StreamItemRow | None: ...

    # -- forks: where a run came from, and the runs forked from it ------------------------

    def run_origin(self, run_id: str) -> RunOrigin | None: ...
    def forks_of(self, run_id: str, limit: int = 500) -> list[RunOrigin]: ...

    # -- queues and schedules -------------------------------------------------------------

    def queue_places(self, run_ids: Sequence[str], now: datetime) -> dict[str, QueuePlace]: ...
    def queue_depths(self) -> list[QueueDepth]: ...
    def queue_entries(self, queue: str, limit: int = 100) -> list[QueueEntry]: ...
    def schedules(self, limit: int = 500) -> list[ScheduleRow]: ...


class ReadOnlyView(Protocol):
    """A zincir database opened for reading only: each snapshot is one short read."""

    @property
    def path(self) -> str:
        """The database, printable (a file path, or a URL without password)."""
        ...

    @property
    def known_version(self) -> int:
        """The newest schema version this code reads."""
        ...

    def check(self) -> None:
        """Raise unless this is a zincir database this code can read (NotAZincirDatabase,
        SchemaTooNew, DatabaseCorrupt, StoreUnavailable, ...)."""
        ...

    def snapshot(self) -> AbstractContextManager[ReadOnlySnapshot]:
        """A :class:`ReadOnlySnapshot` over one consistent read transaction."""
        ...


def open_read_only(
    location: str | os.PathLike[str], *, encryption: Encryption | None = None
) -> ReadOnlyView:
    """The read-only view of the database at ``location``: a SQLite path, ``sqlite:///PATH``
    or a ``postgresql://`` URL (needs the ``postgres`` extra). Nothing is connected yet.

    ``encryption`` opens an encrypted store's payloads (None: the keys in
    ``$ZINCIR_ENCRYPTION_KEYS`` when it is set); read without keys, each payload reads as
    ``‹sealed›`` and the structure as it is."""
    text = os.fspath(location)
    if isinstance(text, str) and text.startswith(POSTGRES_SCHEMES):
        try:
            from .postgres._readonly import ReadOnlyPostgres
        except ImportError as error:
            raise InvalidInput(
                f"reading a PostgreSQL database needs psycopg 3 ({error}); install "
                '"zincir[postgres]"'
            ) from None
        return ReadOnlyPostgres(text, encryption=encryption)
    if isinstance(text, str):
        text = sqlite_path_from_url(text)
    return ReadOnlyDatabase(text, encryption=encryption)
