"""Writes one synced row and one unsynced row through the durable-image VFS, then waits.

    python -m reliability._children.vfs_probe DB

Prints ``synced`` after a commit under ``synchronous=FULL`` and ``unsynced`` after one
under ``synchronous=OFF`` (nothing fsynced), then sleeps until it is killed.
"""

from __future__ import annotations

import sys
import time

import apsw

from reliability._fault_vfs import FaultVFS


def main(database: str) -> None:
    """Commit a synced row and an unsynced one, report each, then wait to be killed."""
    vfs = FaultVFS(track_durability=True)
    conn = apsw.Connection(database)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('synced')")
    print("synced", flush=True)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("INSERT INTO notes VALUES ('unsynced')")
    print("unsynced", flush=True)
    while vfs.track_durability:  # keeps the VFS referenced while the connection lives
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1])
