"""Encryption on Temporal: every payload zincir puts in a workflow history is sealed.

``zincir.temporal.EncryptionCodec`` seals each payload (data and metadata) in the store's
envelope; ``TemporalRuntime``/``Worker``/``zincir temporal-worker`` take ``encryption=``
(``--key-file``, ``$ZINCIR_ENCRYPTION_KEYS``). A canary string in an operation's input, its
result and its errors must appear nowhere in the history the Temporal server keeps, while a
client with the keys reads it back.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import REPO
from tests.integration.temporal_server import TemporalServer
from tests.temporal.sealed_handlers import CANARY, TOOL, finder, registry
from zincir import Encryption, EncryptionKeyMissing, InvalidInput, PayloadTampered
from zincir._encryption import KEYS_ENV
from zincir.agent import Runner
from zincir.contract import Failure, Invocation, OperationKind, Record, Success
from zincir.durable import RetryPolicy

try:
    from google.protobuf.message import Message
    from temporalio.api.common.v1 import Payload
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.failure.v1 import Failure as FailureProto
    from temporalio.client import Client, WorkflowHistory
    from temporalio.converter import (
        DataConverter,
        PayloadCodec,
        SerializationContext,
        WithSerializationContext,
        WorkflowSerializationContext,
    )

    from zincir.temporal import EncryptionCodec, TemporalRuntime, Worker, data_converter
    from zincir.temporal._codec import KEY_ID_METADATA, SEALED_ENCODING, encrypted_client
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytest.importorskip("cryptography")

KEYS = Encryption({"k1": Encryption.generate_key()}, "k1")
FAST_RETRY = RetryPolicy(
    max_attempts=2,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)


@pytest.fixture(autouse=True)
def no_keys_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test says which keys it uses (the suite may run with the variable set)."""
    monkeypatch.delenv(KEYS_ENV, raising=False)


def invocation(mode: str, run_id: str | None = None) -> Invocation:
    return Invocation(
        run_id or f"sealed-{uuid.uuid4().hex}",
        "tool.call",
        0,
        OperationKind.TOOL_CALL,
        TOOL,
        json.dumps({"mode": mode, "text": f"input holds {CANARY}"}),
    )


def flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


# -- the codec alone --------------------------------------------------------------------------

VALUES: list[Any] = [
    "",
    f"text with {CANARY}",
    b"",
    b"\x00\xffbytes " + CANARY.encode(),
    {"nested": [CANARY, 1, None]},
    None,
    CANARY * 100_000,  # 3 MiB of text
    os.urandom(3 << 20),  # 3 MiB that does not compress
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{type(v).__name__}-{len(v or ())}")
async def test_values_round_trip_sealed(value: Any) -> None:
    converter = data_converter(KEYS)
    [payload] = await converter.encode([value])
    assert payload.metadata["encoding"] == SEALED_ENCODING
    assert payload.metadata[KEY_ID_METADATA] == b"k1"
    assert set(payload.metadata) == {"encoding", KEY_ID_METADATA}
    assert CANARY.encode() not in payload.SerializeToString()
    assert await converter.decode([payload]) == [value]
    [again] = await converter.encode([value])
    assert again.data != payload.data  # a fresh nonce each time


async def test_each_payload_keeps_its_metadata_inside_the_seal() -> None:
    codec = EncryptionCodec(KEYS)
    original = Payload(metadata={"encoding": b"json/plain", "note": CANARY.encode()}, data=b"1")
    [sealed] = await codec.encode([original])
    assert CANARY.encode() not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [original]


async def test_payloads_written_before_encryption_pass_through() -> None:
    plain = await DataConverter.default.encode(["written before encryption", b"raw"])
    codec = EncryptionCodec(KEYS)
    assert await codec.decode(plain) == plain
    assert await data_converter(KEYS).decode(plain) == ["written before encryption", b"raw"]


async def test_a_flipped_byte_or_a_forged_payload_is_tampered() -> None:
    codec = EncryptionCodec(KEYS)
    [sealed] = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b"42")])
    header = 4 + len("k1")
    for at in (header, header + 12, len(sealed.data) - 1):  # nonce, ciphertext, tag
        damaged = Payload(metadata=sealed.metadata, data=flipped(sealed.data, at))
        with pytest.raises(PayloadTampered, match="failed its authentication"):
            await codec.decode([damaged])
    cut = Payload(metadata=sealed.metadata, data=sealed.data[:20])
    with pytest.raises(PayloadTampered, match="cut short"):
        await codec.decode([cut])
    forged = Payload(metadata=sealed.metadata, data=b'"a plain value"')
    with pytest.raises(PayloadTampered, match="holds no sealed value"):
        await codec.decode([forged])
    # the same id naming another key is tampering too, never a silent wrong open
    impostor = EncryptionCodec(Encryption({"k1": Encryption.generate_key()}, "k1"))
    with pytest.raises(PayloadTampered):
        await impostor.decode([sealed])


async def test_a_missing_key_is_named_and_no_key_is_shown() -> None:
    [sealed] = await EncryptionCodec(KEYS).encode([Payload(data=b"x")])
    other = Encryption({"k2": Encryption.generate_key()}, "k2")
    with pytest.raises(EncryptionKeyMissing) as raised:
        await EncryptionCodec(other).decode([sealed])
    assert raised.value.key_id == "k1"
    assert "'k1'" in str(raised.value) and "k2" in str(raised.value)
    for keys in (KEYS, other):
        for key_id in keys.key_ids:
            key = keys.key(key_id)
            assert key is not None
            assert base64.b64encode(key).decode() not in str(raised.value)
    assert "k1" in repr(EncryptionCodec(KEYS))
    assert base64.b64encode(KEYS.key("k1") or b"").decode() not in repr(EncryptionCodec(KEYS))


async def test_a_rotated_key_set_opens_old_payloads_and_seals_with_the_new_key() -> None:
    [old] = await data_converter(KEYS).encode([CANARY])
    rotated = Encryption({"k1": KEYS.key("k1") or b"", "k2": Encryption.generate_key()}, "k2")
    converter = data_converter(rotated)
    assert await converter.decode([old]) == [CANARY]
    [new] = await converter.encode([CANARY])
    assert new.metadata[KEY_ID_METADATA] == b"k2"


async def test_failure_messages_and_stack_traces_are_sealed() -> None:
    converter = data_converter(KEYS)
    failure = FailureProto()
    try:
        raise RuntimeError(f"failed on {CANARY}")
    except RuntimeError as error:
        await converter.encode_failure(error, failure)
    assert failure.message == "Encoded failure" and failure.stack_trace == ""
    assert failure.encoded_attributes.metadata["encoding"] == SEALED_ENCODING
    assert CANARY.encode() not in failure.SerializeToString()
    decoded = await converter.decode_failure(failure)
    assert CANARY in str(decoded)


class Marking(PayloadCodec, WithSerializationContext):
    """A user's own codec: marks each payload (with its workflow id, given a context)."""

    def __init__(self, workflow_id: str = "") -> None:
        self.workflow_id = workflow_id

    def with_context(self, context: SerializationContext) -> Marking:
        assert isinstance(context, WorkflowSerializationContext)
        return Marking(context.workflow_id)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(
                metadata={"encoding": b"binary/marked", "wf": self.workflow_id.encode()},
                data=p.SerializeToString(),
            )
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(p.data) for p in payloads]


async def test_a_users_codec_runs_inside_the_seal() -> None:
    base = dataclasses.replace(DataConverter.default, payload_codec=Marking())
    converter = data_converter(KEYS, base)
    [sealed] = await converter.encode([CANARY])
    assert sealed.metadata["encoding"] == SEALED_ENCODING
    [inner] = await EncryptionCodec(KEYS).decode([sealed])
    assert inner.metadata["encoding"] == b"binary/marked"
    assert await converter.decode([sealed]) == [CANARY]
    # the user's codec still gets its serialization context
    context = WorkflowSerializationContext(namespace="default", workflow_id="wf-1")
    [sealed] = await converter.with_context(context).encode([CANARY])
    [inner] = await EncryptionCodec(KEYS).decode([sealed])
    assert inner.metadata["wf"] == b"wf-1"


def test_the_codec_takes_an_encryption() -> None:
    with pytest.raises(InvalidInput, match=r"zincir\.Encryption"):
        EncryptionCodec("k1")  # type: ignore[arg-type]


# -- on a real Temporal server ----------------------------------------------------------------


@pytest.fixture
async def client(temporal_server: TemporalServer) -> Client:
    return await Client.connect(temporal_server.address, namespace=temporal_server.namespace)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as exits:
        yield exits


async def serve(
    client: Client, stack: AsyncExitStack, encryption: Encryption | None, **options: Any
) -> TemporalRuntime:
    """A Worker for the canary tool on a fresh task queue, and a runtime for it."""
    queue = f"sealed-{uuid.uuid4().hex}"
    await stack.enter_async_context(Worker(client, registry, queue, encryption=encryption))
    return runtime_for(client, queue, encryption, **options)


def runtime_for(
    client: Client, queue: str, encryption: Encryption | None, **options: Any
) -> TemporalRuntime:
    return TemporalRuntime(
        client,
        task_queue=queue,
        registrations=[("tool_call", TOOL)],
        retry=FAST_RETRY,
        encryption=encryption,
        **options,
    )


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload anywhere inside a protobuf message."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            items = [value]
        elif field.message_type.GetOptions().map_entry:
            items = list(value.values())
        else:  # a repeated field
            items = list(value)
        for item in items:
            if isinstance(item, Message):
                yield from payloads_in(item)


async def history_of(client: Client, runtime: TemporalRuntime, inv: Invocation) -> WorkflowHistory:
    return await client.get_workflow_handle(runtime.workflow_id(inv)).fetch_history()


def clear_text(history: WorkflowHistory) -> tuple[bytes, str]:
    """What the server keeps, in its bytes and as JSON."""
    return b"".join(event.SerializeToString() for event in history.events), history.to_json()


def assert_only_sealed(history: WorkflowHistory, key_id: str = "k1") -> int:
    raw, text = clear_text(history)
    assert CANARY.encode() not in raw
    assert CANARY not in text
    found = [p for event in history.events for p in payloads_in(event)]
    assert found
    for payload in found:
        assert payload.metadata["encoding"] == SEALED_ENCODING, payload.metadata
        assert payload.metadata[KEY_ID_METADATA] == key_id.encode()
    return len(found)


async def test_a_history_holds_no_input_result_or_error_in_clear(
    client: Client, stack: AsyncExitStack
) -> None:
    runtime = await serve(client, stack, KEYS)
    ok, retried, crashed = invocation("ok"), invocation("retryable"), invocation("crash")
    records = {inv.run_id: await runtime.execute(inv) for inv in (ok, retried, crashed)}

    assert records[ok.run_id].outcome == Success(
        json.dumps({"echo": f"input holds {CANARY}", "seen": CANARY}, separators=(",", ":"))
    )
    assert records[retried.run_id].outcome == Failure("Throttled", True, f"throttled on {CANARY}")
    crash = records[crashed.run_id].outcome
    assert isinstance(crash, Failure) and CANARY in (crash.message or "")

    for inv in (ok, retried, crashed):
        history = await history_of(client, runtime, inv)
        assert assert_only_sealed(history) >= 3  # input, memo, activity input, result...
        failures = [
            event.activity_task_failed_event_attributes.failure
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        ]
        assert len(failures) == (1 if inv is retried else 0)  # a crash is not retried
        for failure in failures:  # the message and stack trace moved into the sealed payload
            assert failure.message == "Encoded failure" and failure.stack_trace == ""
            assert failure.HasField("encoded_attributes")

    # a client with the keys reads the result whole; one without sees sealed payloads only
    sealed_client = encrypted_client(client, KEYS)
    assert sealed_client is not client and sealed_client.service_client is client.service_client
    handle = sealed_client.get_workflow_handle(runtime.workflow_id(ok), result_type=str)
    assert CANARY in await handle.result()
    with pytest.raises(KeyError, match="binary/zincir-sealed"):
        await client.get_workflow_handle(runtime.workflow_id(ok)).result()


async def test_without_encryption_the_canary_is_in_clear(
    client: Client, stack: AsyncExitStack
) -> None:
    """The check above sees a clear canary: the same run without keys shows it."""
    runtime = await serve(client, stack, None)
    inv = invocation("retryable")
    assert isinstance((await runtime.execute(inv)).outcome, Failure)
    raw, text = clear_text(await history_of(client, runtime, inv))
    assert CANARY.encode() in raw
    assert f"throttled on {CANARY}" in text  # the failure's message field


async def test_readers_without_the_key_get_typed_errors_naming_the_run(
    client: Client, stack: AsyncExitStack
) -> None:
    runtime = await serve(client, stack, KEYS)
    inv = invocation("ok")
    record = await runtime.execute(inv)
    queue = runtime.task_queue

    other = Encryption({"k2": Encryption.generate_key()}, "k2")
    with pytest.raises(EncryptionKeyMissing) as raised:
        await runtime_for(client, queue, other).execute(inv)
    assert raised.value.key_id == "k1" and raised.value.run_id == inv.run_id
    assert runtime.workflow_id(inv) in str(raised.value)

    with pytest.raises(EncryptionKeyMissing, match=r"has no keys") as blind:
        await runtime_for(client, queue, None).execute(inv)
    assert blind.value.run_id == inv.run_id

    # the old key among new ones still reads the stored record (no new workflow runs)
    rotated = Encryption({"k1": KEYS.key("k1") or b"", "k2": other.key("k2") or b""}, "k2")
    assert await runtime_for(client, queue, rotated).execute(inv) == record


async def test_a_tampered_history_payload_is_refused(client: Client, stack: AsyncExitStack) -> None:
    runtime = await serve(client, stack, KEYS)
    inv = invocation("ok")
    await runtime.execute(inv)
    history = await history_of(client, runtime, inv)
    started = history.events[0].workflow_execution_started_event_attributes
    [payload] = started.input.payloads[:1]
    codec = EncryptionCodec(KEYS)
    [opened] = await codec.decode([payload])
    assert CANARY.encode() in opened.data
    damaged = Payload(metadata=payload.metadata, data=flipped(payload.data, len(payload.data) // 2))
    with pytest.raises(PayloadTampered):
        await codec.decode([damaged])


async def test_history_written_before_encryption_is_still_read(
    client: Client, stack: AsyncExitStack
) -> None:
    plain = await serve(client, stack, None)
    inv = invocation("ok")
    record = await plain.execute(inv)
    sealed = runtime_for(client, plain.task_queue, KEYS)
    assert await sealed.execute(inv) == record


async def test_the_keys_come_from_the_environment(
    client: Client, stack: AsyncExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEYS_ENV, KEYS.to_json())
    runtime = await serve(client, stack, None)
    inv = invocation("retryable")
    record = await runtime.execute(inv)
    assert record.outcome == Failure("Throttled", True, f"throttled on {CANARY}")
    assert_only_sealed(await history_of(client, runtime, inv))


async def test_a_client_that_already_seals_is_kept(client: Client) -> None:
    config = client.config()
    config["data_converter"] = data_converter(KEYS)
    sealing = Client(**config)
    assert encrypted_client(sealing, KEYS) is sealing
    assert encrypted_client(client, None) is client
    runtime = TemporalRuntime(sealing, task_queue="q", registrations=[], encryption=KEYS)
    assert runtime.client is sealing


async def test_the_cli_worker_seals_with_its_key_file(
    client: Client, temporal_server: TemporalServer, tmp_path: Path
) -> None:
    queue, key_file = f"sealed-cli-{uuid.uuid4().hex}", tmp_path / "keys.json"
    key_file.write_text(KEYS.to_json())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop(KEYS_ENV, None)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zincir",
            "temporal-worker",
            "tests.temporal.sealed_handlers:registry",
            "--address",
            temporal_server.address,
            "--task-queue",
            queue,
            "--key-file",
            str(key_file),
        ],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert worker.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(worker.stderr.readline), 60)
        assert "sealed with key 'k1'" in line, line + worker.stderr.read()[-3000:]
        runtime = runtime_for(client, queue, KEYS)
        inv = invocation("ok")
        record = await asyncio.wait_for(runtime.execute(inv), 60)
        assert isinstance(record, Record) and isinstance(record.outcome, Success)
        assert CANARY in record.outcome.output_json
        assert_only_sealed(await history_of(client, runtime, inv))
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0


def test_the_cli_worker_refuses_unreadable_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from zincir.temporal._cli import temporal_worker_command

    target = "tests.temporal.sealed_handlers:registry"
    bad = tmp_path / "keys.json"
    bad.write_text("not json")
    result = CliRunner().invoke(
        temporal_worker_command, [target, "--task-queue", "q", "--key-file", str(bad)]
    )
    assert result.exit_code == 2 and "--key-file" in result.output
    assert "is not JSON" in result.output
    monkeypatch.setenv(KEYS_ENV, '{"keys": {}}')
    result = CliRunner().invoke(temporal_worker_command, [target, "--task-queue", "q"])
    assert result.exit_code == 2 and KEYS_ENV in result.output


async def test_an_agent_turn_leaves_no_clear_payload(client: Client, tmp_path: Path) -> None:
    queue = f"sealed-agent-{uuid.uuid4().hex}"
    store = zincir.open_store(tmp_path / "agent.db")
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=Runner.handlers_for(finder).configured(),
            retry=FAST_RETRY,
            encryption=KEYS,
        )
        runner = Runner(store, [finder], runtime=runtime)
        async with Worker(client, runner.registry, queue, encryption=KEYS):
            result = await runner.run(finder, f"find {CANARY}")
        assert result.output == f"the answer is {CANARY}"
    finally:
        await store.close()
    workflow_ids: list[str] = []
    for _ in range(100):  # visibility lags a little
        listed = client.list_workflows(f'TaskQueue="{queue}"')
        workflow_ids = [execution.id async for execution in listed]
        if len(workflow_ids) >= 3:
            break
        await asyncio.sleep(0.1)
    assert len(workflow_ids) == 3  # two model requests and the tool call
    for workflow_id in workflow_ids:
        assert_only_sealed(await client.get_workflow_handle(workflow_id).fetch_history())
