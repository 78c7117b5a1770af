"""The fault VFS itself: a power loss keeps what was fsynced and drops the rest; a planned
I/O error reaches SQLite's caller as the error a real disk would return."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from reliability._children import Child
from reliability._fault_vfs import DURABLE_SUFFIX, FAULT_KINDS, FaultPlan, FaultVFS, lose_power

pytestmark = pytest.mark.crash


def notes(database: Path) -> list[str]:
    """The rows of the probe's table, read with SQLite's own VFS."""
    conn = apsw.Connection(str(database))
    try:
        return [str(text) for (text,) in conn.execute("SELECT text FROM notes ORDER BY rowid")]
    finally:
        conn.close()


def test_a_synced_write_survives_power_loss_and_an_unsynced_one_does_not(tmp_path: Path) -> None:
    database = tmp_path / "probe.db"
    child = Child("vfs_probe", str(database), stderr_path=tmp_path / "stderr.txt")
    assert child.line(timeout=30) == "synced", child.stderr()
    assert child.line(timeout=30) == "unsynced", child.stderr()
    # Written through: before the power loss, the real files hold both rows.
    assert notes(database) == ["synced", "unsynced"]
    child.kill()
    assert child.process.returncode == -9
    assert lose_power(database) == [str(database), f"{database}-wal"]
    assert not Path(f"{database}-shm").exists()
    assert not list(tmp_path.glob(f"*{DURABLE_SUFFIX}*"))
    assert notes(database) == ["synced"]
    conn = apsw.Connection(str(database))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


@pytest.fixture
def fault_vfs() -> Iterator[FaultVFS]:
    """The fault VFS under a name of its own (not the default: this is the test process)."""
    vfs = FaultVFS("zincir-fault-test", makedefault=False)
    yield vfs
    vfs.unregister()


def open_table(database: Path, vfs: FaultVFS) -> apsw.Connection:
    """A WAL database with an empty table ``t``, opened through ``vfs``, fsyncing commits."""
    conn = apsw.Connection(str(database), vfs=vfs.vfs_name)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (n INTEGER)")
    return conn


def rows(conn: apsw.Connection) -> list[int]:
    """The values in table ``t``, in order."""
    return [int(n) for (n,) in conn.execute("SELECT n FROM t ORDER BY n")]


def test_an_unreachable_fault_point_only_counts(fault_vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_table(tmp_path / "t.db", fault_vfs)
    fault_vfs.arm(FaultPlan("ioerr", at=10**9))
    conn.execute("INSERT INTO t VALUES (1)")
    assert fault_vfs.injected == 0
    assert fault_vfs.calls["write"] >= 1 and fault_vfs.calls["sync"] >= 1
    assert fault_vfs.eligible == sum(fault_vfs.calls[op] for op in FAULT_KINDS["ioerr"])
    conn.close()


def test_a_one_off_full_disk_fails_one_commit(fault_vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_table(tmp_path / "t.db", fault_vfs)
    fault_vfs.arm(FaultPlan("full", at=1))
    with pytest.raises(apsw.FullError):
        conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("INSERT INTO t VALUES (2)")
    assert fault_vfs.injected == 1
    assert rows(conn) == [2]
    conn.close()


def test_a_persistent_io_error_lasts_until_disarmed(fault_vfs: FaultVFS, tmp_path: Path) -> None:
    conn = open_table(tmp_path / "t.db", fault_vfs)
    fault_vfs.arm(FaultPlan("ioerr", at=1, persistent=True))
    for n in range(3):
        with pytest.raises(apsw.IOError):
            conn.execute("INSERT INTO t VALUES (?)", (n,))
    assert fault_vfs.injected >= 3
    fault_vfs.disarm()
    conn.execute("INSERT INTO t VALUES (9)")
    assert rows(conn) == [9]
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
