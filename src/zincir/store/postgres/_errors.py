"""The one boundary where psycopg's exceptions become zincir's.

Every statement the PostgreSQL backend runs goes through :meth:`PostgresBase._write`,
:meth:`PostgresBase._read` or :func:`translating`, which call :func:`translate`; nothing
above ``store/`` ever sees a ``psycopg`` exception.
"""

from __future__ import annotations

import psycopg
import psycopg_pool
from psycopg import errors

from ..._errors import (
    ConnectionLost,
    DatabaseReadOnly,
    InvalidInput,
    StoreError,
    StoreUnavailable,
    ZincirError,
)
from .._translating import translator

__all__ = ["DRIVER_ERRORS", "RETRYABLE", "translate", "translating"]

DRIVER_ERRORS = (psycopg.Error, psycopg_pool.PoolTimeout, OverflowError, UnicodeError)
"""What a statement can raise from the driver, its pool or from binding a value."""

RETRYABLE = (errors.SerializationFailure, errors.DeadlockDetected)
"""Conflicts the server resolved by aborting one transaction: run it again, unchanged."""


def translate(error: BaseException, where: str) -> ZincirError:
    """The zincir error for a driver (or binding) error raised on the database ``where``."""
    if isinstance(error, psycopg_pool.PoolTimeout):
        return StoreUnavailable(
            f"no connection to {where} became free in time ({error}); nothing was written: "
            "try again, or give the store a larger pool"
        )
    if isinstance(error, errors.DiskFull | errors.OutOfMemory | errors.TooManyConnections):
        return StoreUnavailable(f"the server at {where} refused the work ({error}); try again")
    if isinstance(error, (errors.QueryCanceled, errors.LockNotAvailable, *RETRYABLE)):
        return StoreUnavailable(
            f"{where} could not finish the transaction ({error}); nothing was written: try again"
        )
    if isinstance(error, errors.ReadOnlySqlTransaction | errors.InsufficientPrivilege):
        return DatabaseReadOnly(f"{where} cannot be written by this role ({error})")
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        # A broken connection, a server shutting down or restarting, a terminated backend.
        return ConnectionLost(
            f"the connection to {where} broke ({str(error).strip() or type(error).__name__}); "
            "a write in flight may or may not be stored: try again once the server is back"
        )
    if isinstance(error, psycopg.DataError | OverflowError | UnicodeError):
        return InvalidInput(f"a value cannot be stored in PostgreSQL: {error}")
    return StoreError(f"PostgreSQL error on {where}: {error}")


translating = translator(DRIVER_ERRORS, translate)
"""``with translating(where):`` driver errors raised inside become zincir errors."""
