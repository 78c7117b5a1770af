"""The rule seam (store/_sql.py): statements written once, and rules that import no driver."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.unit.test_layers import drivers_imported
from zincir.store._sql import micros, sql

STORE = Path(__file__).resolve().parents[2] / "src" / "zincir" / "store"


def test_a_statement_is_written_once_and_converted_for_psycopg() -> None:
    statement = sql("SELECT a FROM t WHERE b = ? AND c LIKE 'x%?' AND d {in_list}{for_update}")
    assert statement.sqlite == (
        "SELECT a FROM t WHERE b = ? AND c LIKE 'x%?' AND d IN (SELECT value FROM json_each(?))"
    )
    assert statement.postgres == (
        "SELECT a FROM t WHERE b = %s AND c LIKE 'x%%?' AND d = ANY(%s) FOR UPDATE"
    )


def test_a_quoted_name_keeps_its_question_mark() -> None:
    statement = sql("SELECT \"a?b\", 'it''s ?' FROM t WHERE x = ?")
    assert statement.postgres == "SELECT \"a?b\", 'it''s ?' FROM t WHERE x = %s"


def test_a_duration_is_given_in_whole_microseconds() -> None:
    assert micros(timedelta(days=1, microseconds=7)) == 86_400_000_007


def test_the_rule_modules_import_no_database_driver() -> None:
    found = [
        f"{path.name}: {name}" for path in STORE.glob("_*.py") for name in drivers_imported(path)
    ]
    assert found == []


def test_a_json_field_is_named_by_a_parameter() -> None:
    statement = sql("SELECT id FROM messages WHERE {json_field:payload} = ?")
    assert statement.sqlite == "SELECT id FROM messages WHERE (payload ->> ?) = ?"
    assert statement.postgres == (
        "SELECT id FROM messages WHERE (CAST(payload AS json) ->> CAST(%s AS text)) = %s"
    )
