"""Content stored once: a long conversation's messages are kept once, its records and inputs
are whole on read, a prune keeps what another run refers to, and a database written before
(whole inputs and records in every row) is migrated and replayed."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, is_postgres, select
from tests.store import content_agent
from zincir._json import encode_part
from zincir.contract import decode_record, encode_record
from zincir.contract._codec import decode_record_for, record_input_removed
from zincir.store import OperationKey, Store
from zincir.store._content import IDENTITY_LEFT_OUT, OUTPUT_PARTS, identity_of
from zincir.store._readonly import open_read_only

FIXTURE = Path(__file__).with_name("pre_content.db")
"""A SQLite database written by zincir before content was stored once (see
make_pre_content_db.py): run ``catalogue`` stopped after 12 turns."""
WORKER = Path(__file__).with_name("content_agent.py")


def keys(target: str, run_id: str) -> list[OperationKey]:
    return [
        OperationKey(run_id, step, sequence)
        for step, sequence in select(
            target,
            "SELECT step_id, sequence FROM operations WHERE run_id = ? ORDER BY sequence, step_id",
            (run_id,),
        )
    ]


async def whole_records(store: Store, target: str, run_id: str) -> dict[OperationKey, str]:
    """Every record of the run as ``get_operation`` returns it, each checked canonical."""
    found = {}
    for key in keys(target, run_id):
        row = await store.get_operation(key)
        assert row is not None
        if row.status == "claimed":  # the request a stopped run was about to make
            assert row.record is None
            continue
        assert row.record is not None
        record = decode_record(row.record)  # the digest of the composed input is checked
        assert encode_record(record) == row.record
        assert record.input_digest == row.input_digest
        found[key] = row.record
    return found


def no_dangling_content(target: str) -> None:
    """Every reference names stored content, and all content is referred to."""
    assert (
        select(
            target,
            "SELECT hash FROM content_refs WHERE hash NOT IN (SELECT hash FROM content)",
        )
        == []
    )
    assert (
        select(target, "SELECT hash FROM content WHERE hash NOT IN (SELECT hash FROM content_refs)")
        == []
    )


async def test_a_long_conversation_is_stored_once_and_read_whole(
    store: Store, store_url: str
) -> None:
    await content_agent.run_on(store, "long", 30)
    records = await whole_records(store, store_url, "long")
    model = [key for key in records if key.step_id.endswith("model.request")]
    assert len(model) == 31
    last = decode_record(records[model[-1]]).invocation.input_json
    assert content_agent.section_text(30) in last and content_agent.section_text(1) in last
    # The rows hold descriptions and records without their input: no message is repeated.
    stored = select(
        store_url,
        "SELECT input_json, input_parts, record FROM operations WHERE run_id = 'long' "
        "AND kind = 'model_request' ORDER BY sequence",
    )
    assert all(parts is not None and text == "" for text, parts, _ in stored[1:])
    assert max(len(record) for _, _, record in stored) < 2_000
    assert max(len(parts) for _, parts, _ in stored[1:]) < 2_000
    total = select(store_url, "SELECT SUM(LENGTH(body)) FROM content")[0][0]
    assert total < 3 * 30 * 500  # each tool result once (with its node), not 30 times
    no_dangling_content(store_url)
    # The read-only view (the inspector, zincir runs) shows the same whole input and record.
    with open_read_only(store_url).snapshot() as view:
        rows = {(row["step_id"], row["sequence"]): row for row in view.operations("long", 500)}
    key = model[-1]
    row = rows[(key.step_id, key.sequence)]
    assert row["record"] == zincir_json(records[key])
    assert row["input_json"] == zincir_json(last)
    # A replaying runtime's read: the record as stored, bound to its input by the digest.
    kept = await store.get_operation_as_stored(key)
    assert kept is not None and kept.record is not None
    assert kept.record == record_input_removed(records[key]) != records[key]
    assert kept.input_digest == decode_record(records[key]).input_digest
    invocation = decode_record(records[key]).invocation
    invocation.validate(None)
    assert encode_record(decode_record_for(kept.record, invocation)) == records[key]


async def test_a_long_tool_result_is_stored_once_and_read_whole(
    store: Store, store_url: str
) -> None:
    """A tool result of 2 KB is one content row: the tool call's record keeps its output's
    description, the ``tool_result`` event keeps "" in its place, the next request's message
    refers to it; every read (records, the log, the read-only view, archived events) gets
    the whole text back, and a prune removes it with the run."""
    result = await content_agent.run_on(store, "big", 6, size=2048)
    assert result.output == "read 6 sections"
    text = content_agent.section_text(3, 2048)
    literal = encode_part(text)
    digest = hashlib.sha256(literal.encode()).hexdigest()
    assert select(store_url, "SELECT COUNT(*) FROM content WHERE hash = ?", (digest,)) == [(1,)]
    tool_records = select(
        store_url,
        "SELECT record FROM operations WHERE run_id = 'big' AND kind = 'tool_call'",
    )
    assert len(tool_records) == 6
    assert all(OUTPUT_PARTS in record and len(record) < 1_200 for (record,) in tool_records)
    stored_events = select(
        store_url,
        "SELECT payload, payload_pieces FROM events WHERE run_id = 'big' AND type = 'tool_result'",
    )
    assert len(stored_events) == 6
    assert all(len(payload) < 200 and pieces for payload, pieces in stored_events)
    records = await whole_records(store, store_url, "big")  # composed, digests checked
    outputs = [
        decode_record(record).outcome
        for key, record in records.items()
        if key.step_id.endswith("tool.call")
    ]
    assert any(text in str(outcome) for outcome in outputs)
    logged = {
        event.payload["id"]: event.payload["result"]
        for event in await store.list_events("big")
        if event.type == "tool_result"
    }
    assert logged["call-3"] == text
    with open_read_only(store_url).snapshot() as view:
        shown = [row for row in view.events("big", 0, 500) if row["type"] == "tool_result"]
    assert [row["payload"]["result"] for row in shown][2] == text
    last_seq = (await store.list_events("big"))[-1].seq
    await store.compact_run("big", max_events=2)  # archived events compose the same
    assert [e.payload for e in await store.list_events("big") if e.type == "tool_result"][2][
        "result"
    ] == text
    with open_read_only(store_url).snapshot() as view:
        again = [row for row in view.events("big", 0, 500) if row["type"] == "tool_result"]
        before = view.events_before("big", last_seq + 1, 500)
    assert again[2]["payload"]["result"] == text
    assert [row["payload"] for row in before if row["type"] == "tool_result"][2]["result"] == text
    no_dangling_content(store_url)
    report = await store.prune_runs(
        before=store.now() + timedelta(days=1), statuses=["completed"], max_events=10_000
    )
    assert report.run_ids == ["big"]
    assert select(store_url, "SELECT COUNT(*) FROM content") == [(0,)]


def zincir_json(text: str) -> Any:
    from zincir._json import loads_strict

    return loads_strict(text)


async def test_a_prune_keeps_the_content_another_run_refers_to(
    store: Store, store_url: str
) -> None:
    await content_agent.run_on(store, "done", 9)  # completed, one turn further
    await content_agent.stop(store, "live", 8)  # the same first 8 turns, still running
    shared = select(
        store_url,
        "SELECT hash FROM content_refs WHERE run_id = 'done' "
        "INTERSECT SELECT hash FROM content_refs WHERE run_id = 'live'",
    )
    assert len(shared) >= 8  # the same messages, stored once for both runs
    only_done = select(
        store_url,
        "SELECT hash FROM content_refs WHERE run_id = 'done' "
        "EXCEPT SELECT hash FROM content_refs WHERE run_id = 'live'",
    )
    assert only_done  # its ninth turn
    report = await store.prune_runs(
        before=store.now() + timedelta(days=1), statuses=["completed"], max_events=10_000
    )
    assert report.run_ids == ["done"]
    assert select(store_url, "SELECT COUNT(*) FROM content_refs WHERE run_id = 'done'") == [(0,)]
    present = {digest for (digest,) in select(store_url, "SELECT hash FROM content")}
    assert {digest for (digest,) in shared} <= present
    assert not {digest for (digest,) in only_done} & present
    no_dangling_content(store_url)
    await whole_records(store, store_url, "live")
    calls: list[str] = []
    result = await content_agent.run_on(store, "live", 8, calls.append)
    assert result.output == "read 8 sections" and calls == ["model 8"]


async def test_a_thousand_turn_run_replays_calling_nothing(db_path: Path) -> None:
    target = str(db_path)
    store = zincir.open_store(target, synchronous="normal")
    try:
        await content_agent.stop(store, "thousand", 1000)
    finally:
        await store.close()
    store = zincir.open_store(target)
    try:
        calls: list[str] = []
        result = await content_agent.run_on(store, "thousand", 1000, calls.append)
        assert result.output == "read 1000 sections"
        assert calls == ["model 1000"]  # every earlier turn replayed from its records
    finally:
        await store.close()
    assert os.path.getsize(target) < 12 * 1024 * 1024


# -- the former format ---------------------------------------------------------------------


def former_records(path: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(input, record) of each operation of a database written before content."""
    import apsw

    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {
            (step, sequence): (text, record)
            for step, sequence, text, record in conn.execute(
                "SELECT step_id, sequence, input_json, record FROM operations"
            )
        }
    finally:
        conn.close()


async def test_a_database_of_the_former_format_is_migrated_and_replayed(tmp_path: Path) -> None:
    db = tmp_path / "former.db"
    shutil.copy(FIXTURE, db)
    before = former_records(db)
    assert len(before) == 25  # 12 turns of a request and a call, and the next request claimed
    store = zincir.open_store(str(db))
    try:
        records = await whole_records(store, str(db), "catalogue")
        assert {(k.step_id, k.sequence): r for k, r in records.items()} == {
            key: record for key, (_, record) in before.items() if record is not None
        }
        converted = select(
            str(db), "SELECT COUNT(*) FROM operations WHERE input_parts IS NOT NULL"
        )[0][0]
        assert converted >= 10  # the long model requests
        no_dangling_content(str(db))
        calls: list[str] = []
        result = await content_agent.run_on(store, "catalogue", 12, calls.append)
        assert result.output == "read 12 sections" and calls == ["model 12"]
    finally:
        await store.close()


async def test_a_killed_conversion_resumes(tmp_path: Path, monkeypatch: Any) -> None:
    """Each batch of the conversion commits: a migration killed midway leaves the rows it
    converted, the step unrecorded, and the next open converts the rest."""
    from zincir.store.sqlite import _content as sqlite_content

    db = tmp_path / "former.db"
    shutil.copy(FIXTURE, db)
    before = former_records(db)
    real = sqlite_content._convert
    done: list[int] = []

    def dies_after_five(conn: Any, key: Any) -> int:
        if len(done) == 5:
            raise KeyboardInterrupt  # as a kill would stop it
        done.append(1)
        return real(conn, key)

    monkeypatch.setattr(sqlite_content, "CONVERT_BATCH", 2)
    monkeypatch.setattr(sqlite_content, "_convert", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        zincir.open_store(str(db))
    monkeypatch.setattr(sqlite_content, "_convert", real)
    assert select(str(db), "SELECT COUNT(*) FROM operations WHERE input_parts IS NOT NULL")[0][
        0
    ] in range(1, 5)
    store = zincir.open_store(str(db))
    try:
        records = await whole_records(store, str(db), "catalogue")
        assert {(k.step_id, k.sequence): r for k, r in records.items()} == {
            key: record for key, (_, record) in before.items() if record is not None
        }
        no_dangling_content(str(db))
    finally:
        await store.close()


async def test_rows_of_the_former_shape_are_converted_on_open(store: Store, store_url: str) -> None:
    """Rows put back into the former shape (whole input, record repeating it, no content)
    and the conversion step unrecorded: opening converts them, and the run replays."""
    await content_agent.stop(store, "old", 10)
    records = await whole_records(store, store_url, "old")
    await store.close()
    statements = [
        # the claim the stopped run left (no record, so no input to put back): taken again
        "DELETE FROM operations WHERE record IS NULL",
        "DELETE FROM content",
        "DELETE FROM content_refs",
        "DELETE FROM schema_migrations WHERE name = 'content_rows'",
    ]
    for key, record in records.items():
        text = decode_record(record).invocation.input_json
        statements.append(
            (
                "UPDATE operations SET input_json = ?, record = ?, input_parts = NULL "
                "WHERE run_id = ? AND step_id = ? AND sequence = ?",
                (text, record, key.run_id, key.step_id, key.sequence),
            )
        )
    execute(store_url, statements)
    assert select(store_url, "SELECT COUNT(*) FROM operations WHERE input_parts IS NOT NULL") == [
        (0,)
    ]
    reopened = zincir.open_store(store_url)
    try:
        assert (
            select(store_url, "SELECT COUNT(*) FROM operations WHERE input_parts IS NOT NULL")[0][0]
            >= 8
        )
        assert await whole_records(reopened, store_url, "old") == records
        no_dangling_content(store_url)
        calls: list[str] = []
        result = await content_agent.run_on(reopened, "old", 10, calls.append)
        assert result.output == "read 10 sections" and calls == ["model 10"]
    finally:
        await reopened.close()


def execute(target: str, statements: list[Any]) -> None:
    """Run statements (text, or (text, params) with ``?`` marks) in one transaction."""
    if is_postgres(target):
        import psycopg

        from zincir.store.postgres._base import split_schema

        conninfo, schema, _ = split_schema(target)
        with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
            for statement in statements:
                text, params = statement if isinstance(statement, tuple) else (statement, ())
                conn.execute(text.replace("?", "%s"), params)
        return
    import apsw

    conn = apsw.Connection(target)
    try:
        with conn:
            for statement in statements:
                text, params = statement if isinstance(statement, tuple) else (statement, ())
                conn.execute(text, params)
    finally:
        conn.close()


# -- a kill while a turn's content is half written ----------------------------------------


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_target(request, tmp_path)


@pytest.mark.crash
async def test_a_kill_with_a_turns_content_half_written_loses_nothing(
    crash_target: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    env["ZINCIR_CRASH_AT"] = "store.content_half_written:6"
    worker = subprocess.run(
        [sys.executable, str(WORKER), crash_target, "killed", "10", str(log)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    no_dangling_content(crash_target)
    store = zincir.open_store(crash_target)
    try:
        await whole_records(store, crash_target, "killed")
        calls: list[str] = []
        result = await content_agent.run_on(store, "killed", 10, calls.append)
        assert result.output == "read 10 sections"
        assert "model 10" in calls and len(calls) < 10  # the turns before the kill replayed
        await whole_records(store, crash_target, "killed")
        no_dangling_content(crash_target)
    finally:
        await store.close()


def test_records_compose_exactly_whatever_the_text_holds() -> None:
    """Escapes, control characters, non-ASCII text and quotes in the pieces of a growing
    input: each record composed from the stored parts (its input escaped in parts, from the
    previous request's on) is the canonical text of the record, byte for byte."""
    from zincir._json import dumps
    from zincir.contract import Invocation, Record, Success
    from zincir.contract._codec import record_without_input
    from zincir.store import NewOperation
    from zincir.store._content import ContentIndex, stored_record
    from zincir.store._operation_records import OperationOutcome

    index, stored = ContentIndex(), {}
    messages: list[dict[str, str]] = []
    for turn in range(12):
        odd = f'turn {turn}: "quoted" back\\slash \n\t\x01 é 😀 \u2028 ' * 20
        messages.append({"role": "tool", "content": odd})
        messages.append({"role": "assistant", "content": f"ok {turn}"})
        text = dumps({"model": "m", "messages": messages, "tools": []})
        invocation = Invocation("odd", "model.request", turn, "model_request", "h", text)
        record = Record.for_invocation(invocation, Success('{"text":"\\"ok\\""}'))
        operation = NewOperation(
            OperationKey("odd", "model.request", turn),
            "model_request",
            "h",
            invocation.input_digest(),
            text,
        )
        plan = index.plan(operation)
        stored.update(plan.rows)
        index.committed("odd", [plan])
        outcome = OperationOutcome(record_without_input(record), "success", {}, True)
        column = stored_record(operation, outcome, plan)
        assert plan.input_parts is not None and len(column) < 400
        reader = ContentIndex()  # a fresh reader composes every part once
        for index_reading in (index, reader):
            composed = index_reading.compose_record(
                column,
                plan.input_json,
                plan.input_parts,
                lambda ds: {d: stored[d] for d in ds},
                identity_of(operation),
            )
            assert composed == encode_record(record)


# -- replay reads no stored input ------------------------------------------------------------


async def test_a_resumed_long_run_composes_no_input_it_replays(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replaying runtime holds each finished operation's invocation: its record is bound to
    it by the input digest, and no stored input is composed; a changed input still drifts
    (the stored input read then, to say what differs)."""
    from zincir.agent import Agent, FunctionModel, tool
    from zincir.agent._durable import DurableExecutor
    from zincir.contract.payloads import ModelResponse, TextPart
    from zincir.store._content import ContentIndex

    target = str(db_path)
    store = zincir.open_store(target, synchronous="normal")
    try:
        await content_agent.stop(store, "resumed", 120)
        await content_agent.stop(store, "drifting", 30)
    finally:
        await store.close()
    composed: list[str | None] = []
    compose_input = ContentIndex.compose_input

    def counted(self: ContentIndex, *args: Any, **kwargs: Any) -> str:
        composed.append(args[1] if len(args) > 1 else kwargs.get("input_parts"))
        return compose_input(self, *args, **kwargs)

    monkeypatch.setattr(ContentIndex, "compose_input", counted)

    async def replay_from_the_start(*_: Any) -> None:
        return None  # a resume skips to its last request (one input composed): not here

    monkeypatch.setattr(DurableExecutor, "restart_at", replay_from_the_start)
    store = zincir.open_store(target)
    try:
        calls: list[str] = []
        result = await content_agent.run_on(store, "resumed", 120, calls.append)
        assert result.output == "read 120 sections"
        assert calls == ["model 120"]  # every earlier turn replayed from its records
        assert [parts for parts in composed if parts is not None] == []
    finally:
        await store.close()

    store = zincir.open_store(target)  # a run stopped at turn 30 asked with other tools
    try:

        @tool(name="read_section")
        async def read_section(section: int) -> str:
            """Read one section of the catalogue, whole."""  # a changed tool definition
            return content_agent.section_text(section)

        drifted = Agent(
            FunctionModel(lambda request: ModelResponse(parts=[TextPart(text="unasked")])),
            name="catalogue",
            tools=[read_section],
        )
        with pytest.raises(zincir.InputDrift, match="recorded with other input") as raised:
            await drifted.run(
                content_agent.PROMPT, durable=content_agent.binding(store, drifted, "drifting")
            )
        assert "read_section" in str(raised.value)  # the stored input read to say what differs
    finally:
        await store.close()


def test_long_strings_of_outputs_and_events_compose_exactly() -> None:
    """A record's output and an event's payload holding long strings with escapes, control
    characters and non-ASCII text (two in one payload, one repeated): the stored forms hold
    each string as a piece, and composing gives the exact text back."""
    from zincir._json import dumps
    from zincir.contract import Invocation, Record, Success
    from zincir.contract._codec import record_without_input
    from zincir.store import NewOperation
    from zincir.store._content import ContentIndex, cut_events, event_payload
    from zincir.store._operation_records import OperationOutcome
    from zincir.store._records import NewEvent

    odd = 'a "quoted" back\\slash \n\t\x01 é 😀 \u2028 ' * 60
    other = "plain text of another result " * 50
    output = dumps({"content": odd, "also": [other, "short"], "again": odd})
    invocation = Invocation("odd", "tool.call", 1, "tool_call", "h", '{"a":1}')
    record = Record.for_invocation(invocation, Success(output))
    operation = NewOperation(
        OperationKey("odd", "tool.call", 1), "tool_call", "h", invocation.input_digest(), '{"a":1}'
    )
    outcome = OperationOutcome(record_without_input(record), "success", {}, True)
    index = ContentIndex()
    plan = index.plan(operation, outcome)
    assert plan.record is not None and OUTPUT_PARTS in plan.record
    assert plan.record.startswith(IDENTITY_LEFT_OUT)  # the row's columns hold it
    assert len(plan.record) < 400 and len(plan.rows) == 2  # odd once, other once
    stored = dict(plan.rows)
    composed = index.compose_record(
        plan.record,
        '{"a":1}',
        None,
        lambda digests: {d: stored[d] for d in digests},
        identity_of(operation),
    )
    assert composed == encode_record(record)

    payload = dumps({"id": "c1", "result": output, "more": odd})
    events, rows = cut_events(
        [NewEvent("tool_result", payload, "c1"), NewEvent("tool_call", payload, "c1")]
    )
    (kind, kept, call_id, pieces), untouched = events
    assert (kind, call_id) == ("tool_result", "c1") and pieces is not None and len(kept) < 300
    assert untouched == ("tool_call", payload, "c1", None)  # intents are kept whole
    texts = dict(rows)
    assert event_payload(kept, pieces, lambda ds: {d: texts[d] for d in ds}) == payload


def test_a_record_is_stored_without_the_identity_its_row_holds_only_when_they_agree() -> None:
    """The stored record leaves out the run, step, sequence, kind, handler and digest its
    row's columns hold, and is whole again on read; a record of another invocation (another
    digest) is kept exactly as it came, so a read never passes it off as the row's."""
    from zincir.contract import Invocation, Record, Success
    from zincir.contract._codec import record_without_input
    from zincir.store import NewOperation
    from zincir.store._content import ContentIndex, stored_record
    from zincir.store._operation_records import OperationOutcome

    invocation = Invocation("ident", "tool.call", 7, "tool_call", "h", '{"a":1}')
    record = Record.for_invocation(invocation, Success('{"ok":true}'))
    outcome = OperationOutcome(record_without_input(record), "success", {}, True)
    mine = NewOperation(
        OperationKey("ident", "tool.call", 7),
        "tool_call",
        "h",
        invocation.input_digest(),
        '{"a":1}',
    )
    index = ContentIndex()
    plan = index.plan(mine, outcome)
    column = stored_record(mine, outcome, plan)
    assert column == IDENTITY_LEFT_OUT + '{"success":{"output_json":"{\\"ok\\":true}"}}}'
    read = index.compose_record(column, '{"a":1}', None, dict, identity_of(mine))
    assert read == encode_record(record)
    other = NewOperation(mine.key, "tool_call", "h", "sha256:" + "0" * 64, '{"a":1}')
    kept = stored_record(other, outcome, index.plan(other, outcome))
    assert kept == record_input_removed(encode_record(record))  # whole but for its input
    assert index.compose_record(kept, '{"a":1}', None, dict, identity_of(other)) == (
        encode_record(record)
    )
