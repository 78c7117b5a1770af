"""The one boundary where APSW's exceptions become zincir's (as httpx maps its transport's).

Every statement the SQLite backend runs goes through :func:`translating` or the writer,
which call :func:`translate`; nothing above ``store/`` ever sees an ``apsw`` exception.
"""

from __future__ import annotations

import apsw

from ..._errors import (
    CommitUncertain,
    DatabaseCorrupt,
    DatabaseReadOnly,
    InvalidInput,
    NotAZincirDatabase,
    StoreError,
    StoreUnavailable,
    ZincirError,
)
from .._translating import translator

__all__ = ["DRIVER_ERRORS", "close_quietly", "commit_failed", "translate", "translating"]

DRIVER_ERRORS = (apsw.Error, OverflowError, UnicodeError)
"""What a statement can raise from the driver or from binding a value; ``translate`` maps each."""


def translate(error: BaseException, path: str) -> ZincirError:
    """The zincir error for a driver (or binding) error raised on the database at ``path``."""
    if isinstance(error, apsw.BusyError | apsw.LockedError):
        return StoreUnavailable(
            f"the database {path} stayed locked by another writer past the busy timeout; "
            "nothing was written: try again, raise busy_timeout or find the stuck process"
        )
    if isinstance(error, apsw.FullError):
        return StoreUnavailable(
            f"the disk holding {path} is full; nothing was written: free space and try again"
        )
    if isinstance(error, apsw.IOError):
        return StoreUnavailable(f"I/O error on {path} ({error}); nothing was written")
    if isinstance(error, apsw.NotADBError):
        return NotAZincirDatabase(
            f"{path} is not an SQLite database (or is encrypted); point zincir at its own file"
        )
    if isinstance(error, apsw.CorruptError):
        return DatabaseCorrupt(
            f"{path} is damaged ({error}); stop writing to it, check it with "
            "`sqlite3 FILE 'PRAGMA integrity_check'` and restore it from a backup"
        )
    if isinstance(error, apsw.ReadOnlyError | apsw.PermissionsError | apsw.AuthError):
        return DatabaseReadOnly(
            f"{path} cannot be written ({error}); check the permissions of the file, its "
            "-wal and -shm files and their folder"
        )
    if isinstance(error, apsw.CantOpenError):
        return StoreError(
            f"cannot open {path} ({error}); check that its folder exists and is writable"
        )
    if isinstance(error, UnicodeDecodeError):
        return DatabaseCorrupt(
            f"{path} holds text that is not valid UTF-8 ({error}); it was written outside "
            "zincir or is damaged: restore it from a backup"
        )
    if isinstance(error, OverflowError | UnicodeError):
        return InvalidInput(f"a value cannot be stored in SQLite: {error}")
    return StoreError(f"SQLite error on {path}: {error}")


def commit_failed(error: BaseException, path: str) -> ZincirError:
    """The zincir error for ``error`` raised by COMMIT: an I/O error there (a failed fsync)
    leaves the write's fate unknown, since a restart may recover it from the WAL."""
    if isinstance(error, apsw.IOError):
        return CommitUncertain(
            f"I/O error on {path} while COMMIT made the write durable ({error}); it may or "
            "may not be stored (a restart may find it): re-read before acting on it"
        )
    return translate(error, path)


def close_quietly(conn: apsw.Connection) -> None:
    """Close ``conn`` after another error, which is the one that matters: a failure of the
    close itself (a checkpoint that could not run) is dropped."""
    try:
        conn.close()
    except DRIVER_ERRORS:
        pass


translating = translator(DRIVER_ERRORS, translate)
"""``with translating(where):`` driver errors raised inside become zincir errors."""
