"""The PostgreSQL backend (psycopg 3): the store for worker processes on several machines."""

from ._base import migrations, split_schema
from ._store import PostgresStore

__all__ = ["PostgresStore", "migrations", "split_schema"]
