"""The block in which a backend's driver errors become zincir's, written once for both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from .._errors import ZincirError

__all__ = ["translator"]

Translate = Callable[[BaseException, str], ZincirError]


def translator(
    driver_errors: tuple[type[BaseException], ...], translate: Translate
) -> Callable[[str], AbstractContextManager[None]]:
    """A ``translating(where)`` block: ``driver_errors`` raised inside it are raised again as
    ``translate(error, where)``, without the driver's chain."""

    @contextmanager
    def translating(where: str) -> Iterator[None]:
        """Turn driver errors raised inside the block into zincir errors."""
        try:
            yield
        except driver_errors as error:
            raise translate(error, where) from None

    return translating
