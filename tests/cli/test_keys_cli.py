"""``zincir keys new|add|list`` and ``zincir reencrypt``: key files written readable by their
owner alone, a rotation done from the shell, and no key ever printed but by ``keys new``
asked to print its file."""

from __future__ import annotations

import asyncio
import base64
import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from tests.helpers import select
from zincir import Encryption
from zincir._encryption import KEYS_ENV, key_id_of
from zincir.cli import main


@pytest.fixture(autouse=True)
def _no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def secrets_of(path: Path) -> list[str]:
    """Every key of a key file as it could be printed: base64 (as stored) and hex."""
    encryption = Encryption.from_file(path)
    shown = []
    for key_id in encryption.key_ids:
        key = encryption.key(key_id)
        assert key is not None
        shown += [base64.b64encode(key).decode("ascii"), key.hex()]
    return shown


def test_keys_new_writes_a_private_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    code, output = invoke("keys", "new", "--id", "2026-12", "--out", str(path))
    assert code == 0, output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    encryption = Encryption.from_file(path)
    assert encryption.key_ids == ("2026-12",) and encryption.active == "2026-12"
    assert "2026-12" in output and all(secret not in output for secret in secrets_of(path))
    before = path.read_bytes()
    code, output = invoke("keys", "new", "--id", "other", "--out", str(path))
    assert code == 1 and "never overwritten" in output and path.read_bytes() == before
    code, output = invoke("keys", "new", "--id", "bad id!")
    assert code == 1 and "key id" in output


def test_keys_new_prints_the_file_when_asked() -> None:
    code, output = invoke("keys", "new", "--id", "k1")
    assert code == 0
    printed = Encryption.from_json(output)
    assert printed.key_ids == ("k1",) and len(printed.key("k1") or b"") == 32


def test_keys_add_extends_the_file_and_activates(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert invoke("keys", "new", "--id", "A", "--out", str(path))[0] == 0
    old = Encryption.from_file(path).key("A")
    code, output = invoke("keys", "add", "--key-file", str(path), "--id", "B")
    assert code == 0 and "active: 'A'" in output
    code, output = invoke("keys", "add", "--key-file", str(path), "--id", "C", "--activate")
    assert code == 0 and "active: 'C'" in output
    encryption = Encryption.from_file(path)
    assert encryption.key_ids == ("A", "B", "C") and encryption.active == "C"
    assert encryption.key("A") == old and encryption.key("B") != encryption.key("C")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["keys.json"]  # no temporary file left
    code, output = invoke("keys", "add", "--key-file", str(path), "--id", "B")
    assert code == 1 and "already holds a key 'B'" in output
    code, output = invoke("keys", "list", "--key-file", str(path))
    assert code == 0 and output.split("\n")[:3] == ["A", "B", "C  (active)"]
    for secret in secrets_of(path):
        assert secret not in output
    assert json.loads(path.read_text())["active"] == "C"


def test_a_rotation_from_the_shell(store_target: str, tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert invoke("keys", "new", "--id", "A", "--out", str(path))[0] == 0

    async def agent(run_id: str) -> None:
        store = zincir.open_store(store_target, encryption=Encryption.from_file(path))
        try:
            ctx = await zincir.AgentContext.create(store, "agent", config={"p": 1}, run_id=run_id)
            await ctx.record_response("an answer")
            await ctx.complete({"answer": 42})
        finally:
            await store.close()

    asyncio.run(agent("run-a"))
    assert invoke("keys", "add", "--key-file", str(path), "--id", "B", "--activate")[0] == 0
    asyncio.run(agent("run-b"))
    code, output = invoke("reencrypt", "--db", store_target, "--key-file", str(path), "--to", "B")
    assert code == 0, output
    assert "agent_runs: 1 of 2 rows resealed" in output
    assert "done:" in output and "rows resealed with key 'B'" in output
    for secret in secrets_of(path):
        assert secret not in output
    stored = select(store_target, "SELECT config, result FROM agent_runs")
    assert {key_id_of(value) for row in stored for value in row} == {"B"}
    code, output = invoke("reencrypt", "--db", store_target, "--key-file", str(path), "--to", "Z")
    assert code == 1 and "'Z'" in output
