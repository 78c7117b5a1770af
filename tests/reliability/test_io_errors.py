"""I/O errors and a full disk at short counts, and regression tests of what the scenario
found: errors while closing escaped untyped, and a failed COMMIT fsync was said to have
written nothing although a restart may recover it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

import zincir
from reliability import io_errors
from reliability._fault_vfs import FaultPlan, FaultVFS
from reliability._harness import Report
from zincir.workflow import WorkflowContext

pytestmark = pytest.mark.crash


@pytest.fixture(scope="module")
def report() -> Report:
    """The scenario at short counts, run once for this module's tests."""
    return io_errors.run(short=True)


def test_every_target_is_met(report: Report) -> None:
    assert report.ok, report.failures()


@pytest.fixture
def default_fault_vfs() -> Iterator[FaultVFS]:
    """The fault VFS as SQLite's default, for this test only (zincir opens with the default)."""
    vfs = FaultVFS("zincir-fault-default", makedefault=True)
    try:
        yield vfs
    finally:
        vfs.unregister()
    assert apsw.vfs_names()[0] == "unix"


async def test_an_io_error_while_closing_the_store_is_a_zincir_error(
    tmp_path: Path, default_fault_vfs: FaultVFS
) -> None:
    store = zincir.open_store(str(tmp_path / "zincir.db"))
    wf = await WorkflowContext.open(store, "run", lease_ttl=60)
    await wf.step("a", lambda: 1)
    await wf.complete()
    default_fault_vfs.arm(FaultPlan("ioerr", at=1))  # the close-time checkpoint's first I/O
    with pytest.raises(zincir.ZincirError):
        await store.close()


def test_an_io_error_while_opening_the_store_is_a_zincir_error(
    tmp_path: Path, default_fault_vfs: FaultVFS
) -> None:
    base = tmp_path / "base.db"
    zincir.open_store(str(base)).close_sync()
    untyped = []
    for point in range(1, 40):
        database = tmp_path / f"{point}.db"
        shutil.copyfile(base, database)
        default_fault_vfs.arm(FaultPlan("ioerr", at=point, persistent=True))
        try:
            store = zincir.open_store(str(database))
        except zincir.ZincirError:
            continue
        except apsw.Error as error:
            untyped.append((point, repr(error)))
            continue
        finally:
            default_fault_vfs.disarm()
        store.close_sync()
    assert untyped == []


async def test_a_commit_whose_fsync_failed_is_not_said_to_be_unwritten(
    tmp_path: Path, default_fault_vfs: FaultVFS
) -> None:
    store = zincir.open_store(str(tmp_path / "zincir.db"))
    wf = await WorkflowContext.open(store, "run", lease_ttl=60)
    # The step's claim commits without fsync; its result's commit fsyncs the WAL: that fails.
    default_fault_vfs.arm(FaultPlan("ioerr", at=1, operations=frozenset({"sync"})))
    with pytest.raises(zincir.CommitUncertain) as failed:
        await wf.step("a", lambda: 1)
    default_fault_vfs.disarm()
    assert default_fault_vfs.failed == ["sync zincir.db-wal"]
    crash = tmp_path / "crash"  # the files as a crash now would leave them (no -shm)
    crash.mkdir()
    for name in ("zincir.db", "zincir.db-wal"):
        shutil.copyfile(tmp_path / name, crash / name)
    await store.close()
    conn = apsw.Connection(str(crash / "zincir.db"))
    (status,) = conn.execute("SELECT status FROM steps WHERE name = 'a'").fetchone()
    conn.close()
    assert status == "completed"  # the failed commit survived the crash…
    assert io_errors.NOTHING_WRITTEN not in str(failed.value)  # …so the error must not deny it
