"""Writes pre_content.db, the fixture of a database written before content was stored once.

Run it with the zincir of that time on the path, from a clone of the commit before it
(88eaa54):

    git clone /path/to/zincir /tmp/before && git -C /tmp/before checkout 88eaa54
    PYTHONPATH=/tmp/before/src:. python tests/store/make_pre_content_db.py

It runs the catalogue conversation of content_agent.py for 12 turns and stops it before the
next model request (the run stays live), so a test can migrate it and replay it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import apsw

import zincir
from tests.store import content_agent

TARGET = Path(__file__).with_name("pre_content.db")


async def main() -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{TARGET}{suffix}"):
            os.remove(f"{TARGET}{suffix}")
    store = zincir.open_store(str(TARGET))
    try:
        await content_agent.stop(store, "catalogue", 12)
    finally:
        await store.close()
    conn = apsw.Connection(str(TARGET))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    finally:
        conn.close()


if __name__ == "__main__":
    asyncio.run(main())
