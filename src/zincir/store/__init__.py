"""The store layer: the ``Store`` protocol, its typed records and ``open_store``.

``open_store`` picks the backend from the path or URL; every SQL statement zincir runs
lives in a backend folder below this package (``sqlite/``, ``postgres/``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from .._encryption import Encryption
from .._errors import InvalidInput
from .._time import Clock
from ._forks import RunOrigin
from ._grouping import grouped_writes, writes_grouped
from ._langgraph_records import (
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    NewGraphCheckpoint,
    ThreadLease,
)
from ._lifecycle import CompactReport, PruneReport
from ._operation_records import (
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
)
from ._protocol import Store, as_store
from ._records import (
    LIVE_STATUSES,
    RUN_COLUMNS,
    TERMINAL_STATUSES,
    CheckpointRecord,
    Event,
    Lease,
    LogEntry,
    NewEvent,
    ResponseEntry,
    RunRecord,
    RunState,
    ToolResultEntry,
    new_owner_id,
)
from ._reencrypt import ReencryptedTable, ReencryptReport, reencrypt
from ._restart_records import ApprovalRow, NewApproval, RestartRow, approval_id
from ._streams import NewStreamItem, StreamItemRow
from ._workflow_records import (
    ChildOutcome,
    ChildResult,
    ReceivedMessage,
    StepClaim,
    TimerRecord,
    WaitAttempt,
)
from .sqlite import SQLiteStore, migrations, sqlite_path_from_url

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "LIVE_STATUSES",
    "RUN_COLUMNS",
    "TERMINAL_STATUSES",
    "ApprovalRow",
    "CheckpointRecord",
    "ChildOutcome",
    "ChildResult",
    "CompactReport",
    "Event",
    "GraphCheckpointQuery",
    "GraphCheckpointRow",
    "GraphWrite",
    "Lease",
    "LogEntry",
    "NewApproval",
    "NewEvent",
    "NewGraphCheckpoint",
    "NewOperation",
    "NewStreamItem",
    "OperationClaim",
    "OperationKey",
    "OperationOutcome",
    "OperationRow",
    "PruneReport",
    "ReceivedMessage",
    "ReencryptReport",
    "ReencryptedTable",
    "ResponseEntry",
    "RestartRow",
    "RunOrigin",
    "RunRecord",
    "RunState",
    "SQLiteStore",
    "StepClaim",
    "Store",
    "StreamItemRow",
    "ThreadLease",
    "TimerRecord",
    "ToolResultEntry",
    "WaitAttempt",
    "approval_id",
    "as_store",
    "default_database_path",
    "grouped_writes",
    "migrations",
    "new_owner_id",
    "open_postgres",
    "open_store",
    "reencrypt",
    "sqlite_path_from_url",
    "writes_grouped",
]


def default_database_path() -> str:
    """``$ZINCIR_DATABASE_PATH``, else ``./zincir.db``."""
    return os.environ.get("ZINCIR_DATABASE_PATH") or "zincir.db"


_DEFAULT_BUSY_TIMEOUT = timedelta(seconds=30)
"""How long a SQLite store waits for another process's lock before StoreUnavailable."""


def open_store(
    url_or_path: str | os.PathLike[str] | None = None,
    *,
    synchronous: Literal["full", "normal"] = "full",
    busy_timeout: timedelta | float = _DEFAULT_BUSY_TIMEOUT,
    clock: Clock | None = None,
    single_process: bool = False,
    encryption: Encryption | None = None,
) -> SQLiteStore | PostgresStore:
    """Open and migrate a store: a SQLite path or ``sqlite:///path`` (default
    $ZINCIR_DATABASE_PATH), or a ``postgresql://`` URL (extra ``postgres``; its schema is
    ``zincir`` unless the URL adds ``?schema=NAME``).

    A file or schema holding another application's tables is refused untouched
    (NotAZincirDatabase); a read-only SQLite file raises DatabaseReadOnly.
    ``single_process=True`` (SQLite only) locks the file for this store alone until it is
    closed, which makes each transaction cheaper; no other process may open it meanwhile.
    ``synchronous`` and ``busy_timeout`` are SQLite's too: a PostgreSQL URL refuses them.
    ``encryption`` (extra ``crypto``) seals every user payload the store writes with its
    active key and opens them with any of its keys (see the encryption guide).
    """
    if url_or_path is not None and not isinstance(url_or_path, str | os.PathLike):
        raise InvalidInput(f"open_store takes a path or URL, not {type(url_or_path).__name__}")
    target = os.fspath(url_or_path) if url_or_path is not None else default_database_path()
    if isinstance(target, bytes):
        raise InvalidInput("open_store takes a text path, not bytes")
    if target.startswith(("postgresql://", "postgres://")):
        if single_process is not False:
            raise InvalidInput(
                "single_process locks an embedded SQLite file; a PostgreSQL store is shared "
                "by design"
            )
        if synchronous != "full":
            raise InvalidInput(
                f"synchronous={synchronous!r} sets an embedded SQLite file's fsync; a PostgreSQL "
                "store's durability is the server's synchronous_commit setting"
            )
        if busy_timeout not in (_DEFAULT_BUSY_TIMEOUT, _DEFAULT_BUSY_TIMEOUT.total_seconds()):
            raise InvalidInput(
                "busy_timeout is how long an embedded SQLite file waits for another process's "
                "lock; a PostgreSQL store waits on row locks, and takes no busy_timeout"
            )
        return open_postgres(target, clock=clock, encryption=encryption)
    return SQLiteStore(
        sqlite_path_from_url(target),
        synchronous=synchronous,
        busy_timeout=busy_timeout,
        clock=clock,
        single_process=single_process,
        encryption=encryption,
    )


def open_postgres(
    url: str,
    *,
    clock: Clock | None = None,
    pool_size: int = 8,
    encryption: Encryption | None = None,
) -> PostgresStore:
    """Open and migrate the PostgreSQL store at ``url`` (needs the ``postgres`` extra)."""
    try:
        from .postgres import PostgresStore
    except ImportError as error:
        raise InvalidInput(
            f"the PostgreSQL store needs psycopg 3 ({error}); install zincir[postgres]"
        ) from None
    return PostgresStore(url, clock=clock, pool_size=pool_size, encryption=encryption)
