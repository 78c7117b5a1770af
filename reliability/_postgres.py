"""A throwaway PostgreSQL server for the scenarios that also run there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def on_postgres(work: Callable[[Any], T]) -> T | str:
    """``work(server)`` on a throwaway server (``tests.postgres_server.PostgresServer``,
    stopped afterwards), or the note saying why it could not run."""
    try:
        from tests.postgres_server import PostgresError, PostgresServer
    except ImportError as error:  # run from outside the repository
        return f"PostgreSQL: not run ({error})."
    server = PostgresServer()
    try:
        server.start()
    except PostgresError as error:
        return f"PostgreSQL: not run (no server: {str(error)[:200]})."
    try:
        return work(server)
    finally:
        server.stop()
