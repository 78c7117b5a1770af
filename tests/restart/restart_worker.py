"""A process that saves restart checkpoints, for the multi-process and SIGKILL tests.

    python restart_worker.py race KIND LOCATION WORKER REVISIONS
    python restart_worker.py churn FOLDER SIZE [POINT REVISION]

``race``: open a ``file`` (LOCATION a folder) or ``sql`` (LOCATION a database) store, print
``ready``, wait for a line on stdin, then save revisions 1..REVISIONS of one checkpoint with
a payload naming WORKER, printing ``won R`` or ``conflict R`` for each, then ``done``.
``churn``: save ever newer revisions of one checkpoint in FOLDER, each with a payload of
about SIZE bytes, printing ``saved R`` after each save returns, until killed. With POINT,
the save of REVISION stops for good at that point and prints it: ``write`` (half the temp
file written), ``replace`` (temp file complete and synced, not yet renamed) or ``renamed``
(renamed over the checkpoint, the folder not yet synced); the test kills it there.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import zincir
from zincir.restart import FileRestartStore, RestartStore, SQLRestartStore

RUN = "race/../rün"
CHECKPOINT = "consumer/1"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def churn_payload(revision: int, size: int) -> dict[str, Any]:
    """A payload whose every part names its revision, so a torn one cannot pass for whole."""
    return {"revision": revision, "blob": f"{revision:08d}" * (size // 8), "end": revision}


async def race(kind: str, location: str, worker: int, revisions: int) -> None:
    opened = zincir.open_store(location) if kind == "sql" else None
    store: RestartStore = FileRestartStore(location) if opened is None else SQLRestartStore(opened)
    say("ready")
    sys.stdin.readline()
    for revision in range(1, revisions + 1):
        try:
            await store.save(RUN, CHECKPOINT, revision, {"worker": worker, "revision": revision})
        except zincir.RevisionConflict:
            say(f"conflict {revision}")
        else:
            say(f"won {revision}")
    if opened is not None:
        await opened.close()
    say("done")


def stop_at(point: str) -> None:
    """Make the next save of a large file stop at ``point`` (real files, real syscalls)."""
    write, replace = os.write, os.replace

    def stop() -> None:
        say(point)
        while True:
            time.sleep(60)

    def half_write(fd: int, data: Any) -> int:
        if len(data) > 10_000:
            write(fd, data[: len(data) // 2])
            stop()
        return write(fd, data)

    def replace_then_stop(source: Any, target: Any) -> None:
        if point == "replace":
            stop()
        replace(source, target)
        stop()

    if point == "write":
        setattr(os, "write", half_write)  # noqa: B010 (mypy would refuse the other signature)
    else:
        setattr(os, "replace", replace_then_stop)  # noqa: B010


async def churn(folder: str, size: int, point: str | None, stop_revision: int) -> None:
    store = FileRestartStore(folder)
    stored = await store.load(RUN, CHECKPOINT)
    revision = 1 if stored is None else stored.revision + 1
    say("ready")
    while True:
        if point is not None and revision == stop_revision:
            stop_at(point)
        await store.save(RUN, CHECKPOINT, revision, churn_payload(revision, size))
        say(f"saved {revision}")
        revision += 1


def main(argv: list[str]) -> None:
    if argv[0] == "race":
        asyncio.run(race(argv[1], argv[2], int(argv[3]), int(argv[4])))
    elif argv[0] == "churn":
        point, stop_revision = (argv[3], int(argv[4])) if len(argv) > 3 else (None, 0)
        asyncio.run(churn(argv[1], int(argv[2]), point, stop_revision))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
