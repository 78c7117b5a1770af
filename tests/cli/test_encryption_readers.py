"""The read commands on an encrypted store: ``--key-file`` (or ``$ZINCIR_ENCRYPTION_KEYS``)
shows the payloads; without keys the structure shows and every payload reads ``‹sealed›``;
a wrong key is a clear error that names key ids, never key bytes. ``zincir approvals``
decides with the key file's keys, so the decision is sealed too."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import zincir
from tests.agent.openai_server import ChatServer, Reply, completion, tool_call
from tests.helpers import select
from tests.integration.test_encryption_canary import (
    AGENT_RUN,
    CANARY,
    FINISHED_RUN,
    RECEIVER_RUN,
    WORKFLOW_RUN,
    put_the_canary_everywhere,
    refund,
)
from zincir._encryption import KEYS_ENV, SEALED, key_id_of
from zincir.agent import Agent, OpenAIChatModel, Runner
from zincir.cli import main
from zincir.store import GraphWrite, NewGraphCheckpoint

KEY_ID = "reader-key"


@pytest.fixture
def keys() -> zincir.Encryption:
    return zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)


def key_file(tmp_path: Path, keys: zincir.Encryption, name: str = "keys.json") -> str:
    path = tmp_path / name
    path.write_text(keys.to_json())
    return str(path)


def key_texts(keys: zincir.Encryption) -> list[str]:
    """The forms a key could be printed in (base64 as in a key file, hex, repr)."""
    key = keys.key(KEY_ID)
    assert key is not None
    return [base64.b64encode(key).decode(), key.hex(), repr(key)[2:-1]]


def zincir_cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


async def in_thread(*args: str) -> Result:
    """A command that runs its own event loop (the approvals), from an async test."""
    return await asyncio.to_thread(zincir_cli, *args)


def output(result: Result) -> str:
    """What the command printed, on stdout and stderr."""
    try:
        return result.output + result.stderr
    except ValueError:  # an older click mixes stderr into output
        return result.output


async def sealed_store(target: str, server: ChatServer, keys: zincir.Encryption) -> None:
    store = zincir.open_store(target, encryption=keys)
    try:
        await put_the_canary_everywhere(store, server)
    finally:
        await store.close()


async def test_runs_show_opens_payloads_with_the_key_file_and_shows_them_sealed_without(
    store_target: str, server: ChatServer, keys: zincir.Encryption, tmp_path: Path
) -> None:
    await sealed_store(store_target, server, keys)
    keyed = key_file(tmp_path, keys)

    opened = zincir_cli("runs", "show", AGENT_RUN, "--db", store_target, "--key-file", keyed)
    assert opened.exit_code == 0, output(opened)
    assert CANARY in opened.output
    assert f"output    all done for {CANARY}" in opened.output
    assert SEALED not in opened.output

    blind = zincir_cli("runs", "show", AGENT_RUN, "--db", store_target)
    assert blind.exit_code == 0, output(blind)
    assert CANARY not in output(blind)
    lines = blind.output.splitlines()
    assert "status    completed" in lines
    assert "events    17" in lines
    assert "config    \u2039sealed\u203a" in lines
    assert "output    \u2039sealed\u203a" in lines
    assert any(line.startswith(f"payload   {SEALED}") for line in lines)
    logged = [line.split() for line in lines if line[:5].strip().isdigit()]
    assert [int(parts[0]) for parts in logged] == list(range(1, 18))  # seqs and types show
    assert {parts[1] for parts in logged} >= {"llm_call", "tool_call", "tool_result"}
    assert {parts[2] for parts in logged} == {SEALED}

    document = json.loads(
        zincir_cli("runs", "show", AGENT_RUN, "--db", store_target, "--json").output
    )
    assert document["sealed"] is True
    assert document["run"]["status"] == "completed"
    assert {event["payload"] for event in document["events"]} == {SEALED}
    assert [event["seq"] for event in document["events"]] == list(range(1, 18))
    whole = zincir_cli(
        "runs", "show", AGENT_RUN, "--db", store_target, "--json", "--key-file", keyed
    )
    assert "sealed" not in json.loads(whole.output)
    assert CANARY in whole.output

    for args in (("runs", "list"), ("runs", "list", "--stuck", "--stuck-for", "0s")):
        listed = zincir_cli(*args, "--db", store_target)
        assert listed.exit_code == 0, output(listed)
        assert CANARY not in listed.output
    listed = zincir_cli("runs", "list", "--db", store_target)
    for run_id in (AGENT_RUN, WORKFLOW_RUN, RECEIVER_RUN, FINISHED_RUN):
        assert run_id in listed.output


async def test_the_keys_in_the_environment_open_the_payloads_too(
    store_target: str,
    server: ChatServer,
    keys: zincir.Encryption,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await sealed_store(store_target, server, keys)
    monkeypatch.setenv(KEYS_ENV, keys.to_json())
    shown = zincir_cli("runs", "show", WORKFLOW_RUN, "--db", store_target)
    assert shown.exit_code == 0, output(shown)
    assert f'config    {{"secret":"{CANARY}"}}' in shown.output.splitlines()


async def test_a_wrong_key_file_is_a_clear_error_that_names_no_key_bytes(
    store_target: str, server: ChatServer, keys: zincir.Encryption, tmp_path: Path
) -> None:
    await sealed_store(store_target, server, keys)
    wrong = zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)
    other = zincir.Encryption({"other-key": zincir.Encryption.generate_key()}, "other-key")
    secrets = [*key_texts(keys), *key_texts(wrong)]

    for command in (("runs", "show", AGENT_RUN), ("runs", "list"), ("approvals", "list")):
        refused = zincir_cli(
            *command, "--db", store_target, "--key-file", key_file(tmp_path, wrong)
        )
        text = output(refused)
        assert refused.exit_code == 1, text
        assert f"the key given as {KEY_ID!r} is not the key" in text
        assert "give the right key file" in text
        assert not any(secret in text for secret in secrets)
        assert CANARY not in text

    missing = zincir_cli(
        "runs",
        "show",
        AGENT_RUN,
        "--db",
        store_target,
        "--key-file",
        key_file(tmp_path, other, "o"),
    )
    assert missing.exit_code == 1
    assert f"sealed with key {KEY_ID!r}, which was not given (keys given: other-key)" in output(
        missing
    )
    assert f"run {AGENT_RUN}" in output(missing)

    absent = zincir_cli("runs", "show", AGENT_RUN, "--db", store_target, "--key-file", "/nowhere")
    assert absent.exit_code == 1
    assert "cannot read the key file '/nowhere'" in output(absent)


def pause_for_approval(server: ChatServer) -> None:
    server.script(
        Reply(
            completion(
                None,
                [tool_call("call-refund", "refund", json.dumps({"order_id": CANARY}))],
                finish_reason="tool_calls",
            )
        )
    )


async def test_approvals_read_and_decide_with_the_key_file(
    store_target: str, server: ChatServer, keys: zincir.Encryption, tmp_path: Path
) -> None:
    store = zincir.open_store(store_target, encryption=keys)
    try:
        pause_for_approval(server)
        agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="refunds", tools=[refund])
        paused = await Runner(store, [agent]).run(agent, "Refund it", run_id="refunds-1")
        assert paused.paused is not None
    finally:
        await store.close()
    keyed = key_file(tmp_path, keys)

    refused = await in_thread("approvals", "list", "--db", store_target)
    assert refused.exit_code == 1
    assert f"is encrypted (key ids: {KEY_ID})" in output(refused)
    assert "--key-file" in output(refused)
    undecided = await in_thread("approvals", "deny", "refunds-1/call-refund", "--db", store_target)
    assert undecided.exit_code == 1
    assert f"key ids: {KEY_ID}" in output(undecided)

    listed = await in_thread(
        "approvals", "list", "--json", "--db", store_target, "--key-file", keyed
    )
    assert listed.exit_code == 0, output(listed)
    [waiting] = json.loads(listed.output)
    assert waiting["arguments"] == {"order_id": CANARY}

    approved = await in_thread(
        "approvals", "approve", waiting["approval_id"], "--by", "alice",
        "--db", store_target, "--key-file", keyed,
    )  # fmt: skip
    assert approved.exit_code == 0, output(approved)
    assert "approved refunds-1/call-refund" in approved.output

    [(decision,)] = select(store_target, "SELECT decision FROM approvals")
    assert key_id_of(decision) == KEY_ID
    stored = bytes(decision) if not isinstance(decision, str) else decision.encode()
    assert stored.startswith(b"zs1") and b"approve" not in stored
    every = await in_thread(
        "approvals", "list", "--all", "--json", "--db", store_target, "--key-file", keyed
    )
    [decided] = json.loads(every.output)
    assert (decided["decision"], decided["decided_by"]) == ("approve", "alice")


async def test_threads_list_and_show_open_values_with_the_key_file_and_show_them_sealed_without(
    store_target: str, keys: zincir.Encryption, tmp_path: Path
) -> None:
    value = json.dumps({"channel_values": {"text": CANARY}}).encode()
    store = zincir.open_store(store_target, encryption=keys)
    try:
        metadata = json.dumps({"step": 1, "who": CANARY})
        await store.put_graph_checkpoint(
            NewGraphCheckpoint("chat-1", "", "0001", None, "json", value, metadata, run_id="r1")
        )
        said = GraphWrite("task", 0, "say", "json", json.dumps({"say": CANARY}).encode())
        await store.put_graph_writes("chat-1", "", "0001", [said])
    finally:
        await store.close()
    keyed = key_file(tmp_path, keys)

    listed = zincir_cli("threads", "list", "--db", store_target)
    assert listed.exit_code == 0, output(listed)
    assert "chat-1" in listed.output and "0001" in listed.output
    blind = zincir_cli("threads", "show", "chat-1", "--db", store_target)
    assert blind.exit_code == 0, output(blind)
    assert CANARY not in blind.output
    assert SEALED in blind.output and f"{len(value)}" in blind.output  # sizes before sealing
    opened = zincir_cli("threads", "show", "chat-1", "--db", store_target, "--key-file", keyed)
    assert opened.exit_code == 0, output(opened)
    assert f'"who":"{CANARY}"' in opened.output  # the metadata
    assert f'{{"say":"{CANARY}"}}' in opened.output  # the pending write
    assert SEALED not in opened.output


async def test_the_key_file_wins_over_the_keys_in_the_environment(
    store_target: str,
    server: ChatServer,
    keys: zincir.Encryption,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await sealed_store(store_target, server, keys)
    stale = zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)
    monkeypatch.setenv(KEYS_ENV, stale.to_json())
    keyed = key_file(tmp_path, keys)
    assert zincir_cli("runs", "show", AGENT_RUN, "--db", store_target).exit_code == 1
    shown = zincir_cli("runs", "show", AGENT_RUN, "--db", store_target, "--key-file", keyed)
    assert shown.exit_code == 0, output(shown)
    assert CANARY in shown.output
    listed = await in_thread(
        "approvals", "list", "--all", "--db", store_target, "--key-file", keyed
    )
    assert listed.exit_code == 0, output(listed)
    assert CANARY in listed.output
