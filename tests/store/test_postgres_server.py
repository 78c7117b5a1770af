"""The PostgreSQL test server and its fixtures: a schema per test, restart, killed backends."""

from __future__ import annotations

import secrets

import psycopg
import pytest

import tests.postgres_server as postgres_server_module
from tests.postgres_server import (
    PostgresNotInstalled,
    PostgresServer,
    schema_name,
    with_search_path,
)


def current_schema(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("turn", ["first", "second"])
def test_each_test_starts_in_an_empty_schema_of_its_own(postgres_url: str, turn: str) -> None:
    # The same table in both turns: the second would hit DuplicateTable if schemas leaked.
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('notes')").fetchone() == (None,)
        conn.execute("CREATE TABLE notes (body text)")
        conn.execute("INSERT INTO notes VALUES (%s)", (turn,))
        row = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'notes'"
        ).fetchone()
    assert row == (current_schema(postgres_url),)
    assert str(row[0]).startswith("t_test_each_test_starts_in_an_empty_schema")


def test_another_schema_is_separate(postgres_server: PostgresServer, postgres_url: str) -> None:
    other = schema_name("other", secrets.token_hex(4))
    other_url = postgres_server.new_schema_url(other)
    try:
        with psycopg.connect(postgres_url) as mine, psycopg.connect(other_url) as theirs:
            mine.execute("CREATE TABLE notes (body text)")
            mine.execute("INSERT INTO notes VALUES ('mine')")
            assert theirs.execute("SELECT to_regclass('notes')").fetchone() == (None,)
            theirs.execute("CREATE TABLE notes (body text)")
            assert theirs.execute("SELECT count(*) FROM notes").fetchone() == (0,)
            assert mine.execute("SELECT body FROM notes").fetchall() == [("mine",)]
        assert current_schema(other_url) == other != current_schema(postgres_url)
    finally:
        postgres_server.drop_schema(other)
    with postgres_server.admin() as admin:
        assert admin.execute("SELECT to_regnamespace(%s)", (other,)).fetchone() == (None,)


def test_restart_keeps_committed_data(postgres_server: PostgresServer, postgres_url: str) -> None:
    if postgres_server.external:
        pytest.skip("$ZINCIR_TEST_POSTGRES_URL: a server the tests did not start is not restarted")
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE notes (body text)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
    with psycopg.connect(postgres_url, autocommit=True) as before:
        postgres_server.restart()
        with pytest.raises(psycopg.OperationalError):
            before.execute("SELECT 1")
    with psycopg.connect(postgres_url) as after:
        assert after.execute("SELECT body FROM notes").fetchall() == [("kept",)]


def test_terminate_backends_kills_only_the_matching_connections(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    tag = f"zincir-test-victim-{secrets.token_hex(4)}"
    with (
        psycopg.connect(postgres_url, application_name=tag, autocommit=True) as victim,
        psycopg.connect(postgres_url, application_name="bystander", autocommit=True) as bystander,
    ):
        victim.execute("SELECT 1")
        assert postgres_server.terminate_backends(f"{tag}%") == 1
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert bystander.execute("SELECT 1").fetchone() == (1,)


def test_search_path_rides_in_the_url_options() -> None:
    url = "postgresql://zincir@127.0.0.1:5432/zincir"
    assert with_search_path(url, "t_a") == f"{url}?options=-csearch_path%3Dt_a"
    assert with_search_path(f"{url}?sslmode=disable&options=-cwork_mem%3D8MB", "t_a") == (
        f"{url}?sslmode=disable&options=-cwork_mem%3D8MB%20-csearch_path%3Dt_a"
    )
    assert len(schema_name("x" * 200, "abcd1234")) == 63


def test_missing_binaries_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(postgres_server_module.ENV_URL, raising=False)
    monkeypatch.setattr(postgres_server_module, "find_bin_dir", lambda: None)
    with pytest.raises(PostgresNotInstalled, match="make system-deps"):
        PostgresServer().start()
