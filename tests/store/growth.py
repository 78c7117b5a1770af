"""How much a store holds as a run grows, turn by turn: the figures the long-input writers'
tests compare (bytes added per turn late in a run against early on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

from tests.helpers import is_postgres, rows, select

STORED_BYTES = (
    "SELECT (SELECT COALESCE(SUM(LENGTH(input_json) + COALESCE(LENGTH(input_parts), 0) "
    "+ COALESCE(LENGTH(record), 0)), 0) FROM operations)"
    " + (SELECT COALESCE(SUM(LENGTH(hash) + LENGTH(body)), 0) FROM content)"
    " + (SELECT COALESCE(SUM(LENGTH(run_id) + LENGTH(hash)), 0) FROM content_refs)"
    " + (SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM events)"
    " + (SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM restart_checkpoints)"
)
"""The characters a store holds in the columns that grow with a run (inputs and their
descriptions, records, content and its references, events, restart checkpoints)."""


def stored_bytes(target: Path | str) -> int:
    """:data:`STORED_BYTES` of the store at ``target`` (either backend)."""
    return int(select(target, STORED_BYTES)[0][0])


def file_bytes(target: Path | str) -> int | None:
    """The SQLite database's size in pages (its WAL's committed pages included), or None
    for PostgreSQL (its relation sizes move in whole pages and free-space maps)."""
    if is_postgres(target):
        return None
    (pages,) = rows(target, "PRAGMA page_count")[0]
    (size,) = rows(target, "PRAGMA page_size")[0]
    return int(pages) * int(size)


@dataclass
class Growth:
    """The store's figures after each turn of a run on ``target``."""

    target: Path | str
    stored: list[int] = field(default_factory=list)
    files: list[int] = field(default_factory=list)

    def sample(self) -> None:
        """Take the figures after a turn."""
        self.stored.append(stored_bytes(self.target))
        size = file_bytes(self.target)
        if size is not None:
            self.files.append(size)

    def assert_linear(self, ratio: float = 1.1) -> tuple[float, float]:
        """Bytes added per turn over the last 30 % of the run are at most ``ratio`` times
        those of turns 10-40 % as stored, and at most :data:`FILE_RATIO` times in a SQLite
        file; the stored pair."""
        early, late = per_turn(self.stored)
        assert late <= ratio * early, (
            f"stored bytes a turn grew from {early:.0f} early to {late:.0f} late"
        )
        if self.files:
            file_early, file_late = per_turn(self.files)
            # The file moves in pages, and a B-tree's inner pages split now and then (a
            # logarithmic growth): three pages over the late window are let pass.
            slack = 3 * PAGE / late_window(len(self.files))
            assert file_late <= FILE_RATIO * file_early + slack, (
                f"database bytes a turn grew from {file_early:.0f} early to {file_late:.0f} late"
            )
        return early, late


PAGE = 4096
FILE_RATIO = 1.6
"""How far a SQLite file's bytes a turn may drift while its content grows linearly: a
B-tree page holds between half and all it can (``operations`` rows grow when their record
is written, and a full page splits in two), and a 200-turn pydantic-ai run's ``operations``
pages go from 1.33 a turn to a steady 2.0 near turn 100 (600 turns: 2.0 to the end)."""


def late_window(turns: int) -> int:
    """How many of ``turns``' additions :func:`per_turn` averages as late."""
    count = turns - 1
    return count - count * 7 // 10


def per_turn(series: list[int]) -> tuple[float, float]:
    """Mean bytes added a turn over turns 10-40 % and over the last 30 % of ``series``."""
    added = [after - before for before, after in zip(series, series[1:], strict=False)]
    count = len(added)
    assert count >= 20, "a growth test needs at least 20 turns"
    return mean(added[count // 10 : count * 4 // 10]), mean(added[count * 7 // 10 :])
