"""`zincir threads list|show`: LangGraph threads read from the read-only view, values shown
by type and size (only JSON decoded), never creating or changing a database."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from tests.inspector.seed_threads import (
    BIG,
    BIG_TAIL,
    MSGPACK_SECRET,
    PACKED,
    PLAIN,
    RAW_SECRET,
    XSS_THREAD,
    checkpoint_id,
    seed_threads,
)
from zincir.cli import main


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("threads-cli") / "zincir.db"
    seed_threads(path)
    return str(path)


def sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_list_shows_threads_newest_first(db: str) -> None:
    before = sha(db)
    code, output = invoke("threads", "list", "--db", db)
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].split()[:3] == ["thread", "id", "checkpoints"]
    assert [line.split()[0] for line in lines[1:]] == [
        BIG,
        PACKED,
        "<script>document.title='pwned'</script>/x?y#z",
        PLAIN,
    ]
    plain = lines[-1]
    assert (
        checkpoint_id(4) in plain and "worker-a until 2999-01-01" in plain and "(token 3)" in plain
    )
    code, limited = invoke("threads", "list", "--limit", "1", "--db", db)
    assert code == 0 and len(limited.splitlines()) == 2 and BIG in limited
    assert sha(db) == before


def test_show_prints_checkpoints_and_pending_writes(db: str) -> None:
    code, output = invoke("threads", "show", PLAIN, "--db", db)
    assert code == 0, output
    assert f"thread       {PLAIN}" in output
    assert "4 in 2 namespace(s): (root), child:task-1" in output
    assert "worker-a until 2999-01-01T00:00:00.000000Z (token 3)" in output
    for n in (1, 2, 3, 4):
        assert checkpoint_id(n) in output
    assert '{"source":"loop","step":2,"run_id":"lg-run-1"}' in output  # metadata
    assert f"newest checkpoint of (root): {checkpoint_id(3)}" in output
    assert '{"say":"hello"}' in output and '[{"value":1}]' in output
    assert "<msgpack, 23 B, not decoded>" in output and "<bytes, 16 B, not decoded>" in output
    assert MSGPACK_SECRET not in output and RAW_SECRET not in output
    assert "task-old" not in output


def test_show_cuts_long_values_and_shows_stored_text_as_it_is(db: str) -> None:
    code, output = invoke("threads", "show", BIG, "--db", db)
    assert code == 0 and "first bytes as text" in output and BIG_TAIL not in output
    assert max(len(line) for line in output.splitlines()) < 300
    code, output = invoke("threads", "show", XSS_THREAD, "--db", db)
    assert code == 0 and XSS_THREAD in output


def test_show_an_unknown_thread_is_one_line_and_exit_1(db: str) -> None:
    code, output = invoke("threads", "show", "no-such-thread", "--db", db)
    assert code == 1 and "no LangGraph thread 'no-such-thread'" in output
    assert len(output.strip().splitlines()) == 1


def test_a_missing_database_is_refused_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    for args in (("threads", "list"), ("threads", "show", PLAIN)):
        code, output = invoke(*args, "--db", str(path))
        assert code == 1 and "zincir demo" in output
    assert not path.exists()


def test_a_database_without_threads(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    zincir.open_store(path).close_sync()
    assert invoke("threads", "list", "--db", str(path)) == (0, "no threads\n")
