"""The packaged migrations of a backend: its ``migrations`` folder's SQL files, read once."""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["packaged_migrations"]


@functools.cache
def packaged_migrations(package: str) -> tuple[tuple[int, str, str], ...]:
    """The migrations of ``package`` (``zincir.store.sqlite``) as (version, name, sql), in
    order: a file ``0003_name.sql`` is version 3."""
    found = []
    folder = resources.files(package).joinpath("migrations")
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), rest.removesuffix(".sql"), entry.read_text("utf-8")))
    return tuple(sorted(found))
