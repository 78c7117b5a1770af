"""What a scenario reports: figures, each beside its target, and the command that reruns it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Figure", "Report", "at_least", "at_most", "equal"]


@dataclass(frozen=True)
class Figure:
    """One measured figure: its value, the target it is held to, and whether it met it."""

    name: str
    value: float | int | str
    target: str
    met: bool

    def shown(self) -> str:
        """The value as ``RELIABILITY.md`` prints it."""
        if isinstance(self.value, float):
            return f"{self.value:,.3g}" if abs(self.value) < 100 else f"{self.value:,.0f}"
        if isinstance(self.value, int):
            return f"{self.value:,}"
        return self.value


def at_most(name: str, value: float, limit: float, unit: str = "") -> Figure:
    """A figure that must not exceed ``limit``."""
    suffix = f" {unit}" if unit else ""
    return Figure(name, value, f"≤ {limit:g}{suffix}", value <= limit)


def at_least(name: str, value: float, limit: float, unit: str = "") -> Figure:
    """A figure that must reach ``limit``."""
    suffix = f" {unit}" if unit else ""
    return Figure(name, value, f"≥ {limit:g}{suffix}", value >= limit)


def equal(name: str, value: float | int | str, expected: float | int | str) -> Figure:
    """A figure that must be exactly ``expected`` (a count of lost writes must be 0)."""
    return Figure(name, value, f"= {expected}", value == expected)


@dataclass
class Report:
    """A scenario's result: its figures, how to rerun it, and what a reader must know."""

    key: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    short: bool = False
    seconds: float = 0.0
    finished: datetime | None = None

    @property
    def ok(self) -> bool:
        """Every figure met its target."""
        return all(figure.met for figure in self.figures)

    def failures(self) -> list[str]:
        """The figures that missed, one line each (for an assertion message)."""
        return [
            f"{self.key}: {figure.name} = {figure.shown()} (target {figure.target})"
            for figure in self.figures
            if not figure.met
        ]

    @property
    def command(self) -> str:
        """The command that reproduces this report's figures."""
        flag = " --short" if self.short else ""
        return f"python -m reliability --only {self.key}{flag}"
