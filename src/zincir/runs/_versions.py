"""Application versions of runs: the default version ($ZINCIR_APP_VERSION) and the registry
of migrations that move a run from one version to the next.

A run records the version of the code that started it (``app_version``; None: unversioned,
no version checks). A :class:`VersionMigrations` registry holds at most one migration out of
each version, so a run of version U reaches version V by one chain U → … → V, or by none. A
ResumeWorker of version V given the registry runs that chain when it claims a run of U,
before its handler: each function, then the version's fenced update with its
``version_migrated`` event. A crash between the two runs that function again on the next
claim, so a migration must be safe to repeat (or keep its effects in durable steps).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, overload

from .._errors import InvalidInput
from .._validate import check_id, name_problem

if TYPE_CHECKING:
    from ._context import AgentContext

__all__ = ["APP_VERSION_ENV", "Migration", "VersionMigrations", "app_version_or_default"]

APP_VERSION_ENV: Final = "ZINCIR_APP_VERSION"

Migration = Callable[["AgentContext"], Awaitable[None] | None]
"""A function that moves one run's durable state to the next version (async or plain)."""


def app_version_or_default(value: str | None, *, run_id: str | None = None) -> str | None:
    """``value`` checked as an id; without one, ``$ZINCIR_APP_VERSION`` (checked) when set
    and not empty; else None (an unversioned run, no version checks)."""
    if value is not None:
        return check_id(value, "an app_version", run_id=run_id)
    found = os.environ.get(APP_VERSION_ENV)
    if not found:
        return None
    problem = name_problem(f"${APP_VERSION_ENV}", found)
    if problem is not None:
        raise InvalidInput(problem, run_id=run_id)
    return found


class VersionMigrations:
    """The registered migrations between application versions, one out of each version.

    ``migrations.register("v1", "v2", fn)``, or as a decorator
    ``@migrations.register("v1", "v2")``; ``fn(ctx)`` receives the claimed run's
    AgentContext before the handler runs.
    """

    def __init__(self) -> None:
        self._next: dict[str, tuple[str, Migration]] = {}

    @overload
    def register(
        self, from_version: str, to_version: str, fn: None = None
    ) -> Callable[[Migration], Migration]: ...
    @overload
    def register(self, from_version: str, to_version: str, fn: Migration) -> Migration: ...
    def register(
        self, from_version: str, to_version: str, fn: Migration | None = None
    ) -> Migration | Callable[[Migration], Migration]:
        """Register ``fn`` as the migration from ``from_version`` to ``to_version``.

        InvalidInput for a bad version, the same version twice, a second migration out of
        ``from_version``, or one that would close a cycle.
        """
        source = check_id(from_version, "a migration's from_version")
        target = check_id(to_version, "a migration's to_version")
        if source == target:
            raise InvalidInput(f"a migration moves a run to another version, not {source!r}")
        if source in self._next:
            raise InvalidInput(
                f"version {source!r} already migrates to {self._next[source][0]!r}; register "
                "one migration out of each version (chain them: v1 → v2 → v3)"
            )
        if self.chain(target, source) is not None:
            raise InvalidInput(f"migrating {source!r} to {target!r} would close a cycle")

        def add(function: Migration) -> Migration:
            if not callable(function):
                raise InvalidInput(f"a migration must be callable (ctx) -> None, not {function!r}")
            self._next[source] = (target, function)
            return function

        return add if fn is None else add(fn)

    def chain(self, from_version: str | None, to_version: str) -> list[tuple[str, str]] | None:
        """The steps (from, to) that move a run of ``from_version`` to ``to_version``, in
        order (none when they are equal); None when no registered chain does."""
        if from_version is None:
            return None
        steps: list[tuple[str, str]] = []
        current = from_version
        while current != to_version:
            found = self._next.get(current)
            if found is None or len(steps) > len(self._next):
                return None
            steps.append((current, found[0]))
            current = found[0]
        return steps

    def sources(self, to_version: str) -> list[str]:
        """Every version a registered chain moves to ``to_version``."""
        return sorted(version for version in self._next if self.chain(version, to_version))

    async def migrate(self, ctx: AgentContext, from_version: str, to_version: str) -> int:
        """Run the chain from ``from_version`` to ``to_version`` on ``ctx``'s run: each
        function, then the run's version moved with its ``version_migrated`` event (fenced).
        Returns how many steps ran; InvalidInput when no chain exists."""
        steps = self.chain(from_version, to_version)
        if steps is None:
            raise InvalidInput(
                f"no registered migration moves version {from_version!r} to {to_version!r}",
                run_id=ctx.run_id,
            )
        for source, target in steps:
            outcome = self._next[source][1](ctx)
            if inspect.isawaitable(outcome):
                await outcome
            ctx.check_lease()
            await ctx.store.set_app_version(ctx.lease, target)
        return len(steps)
