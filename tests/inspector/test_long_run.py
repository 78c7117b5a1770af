"""The page of a 1,000-turn agent run: small and fast, its latest turns shown, older turns and
each operation's input and record loaded on demand through paged routes; the reads behind
it bounded whatever the run's length."""

from __future__ import annotations

import asyncio
import html
import json
import re
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

import zincir
from tests.inspector.cdp import chromium_page
from tests.inspector.conftest import ADDRESS, BASE_URL, client_for, seed
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed_long import (
    FAILED_ERROR,
    INSTRUCTIONS,
    PROMPT,
    LongRun,
    result_text,
    seed_long_run,
    turn_text,
)
from tests.inspector.test_browser import require_chromium
from tests.inspector.test_postgres_pages import seed_pg
from tests.inspector.ui_process import ui_server
from tests.postgres_server import PostgresServer, schema_name
from zincir.contract import decode_record
from zincir.inspector import create_app
from zincir.inspector._app import conversation_url, event_url, operation_url, run_url
from zincir.inspector._db import CHAT_EVENTS, EVENT_PAGE_SIZE, OPERATION_PAGE
from zincir.store import OperationKey
from zincir.store._readonly import open_read_only

TURNS = 1000
PG_TURNS = 200
BIG_RESULT = 50_000  # characters of each tool result of the heavy run
MAX_PAGE_BYTES = 1_000_000
MAX_MEDIAN_S = 0.2
MAX_ROWS_READ = 1_500  # rows the run page may read, whatever the run's length


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LongRun]:
    path = tmp_path_factory.mktemp("long-run") / "zincir.db"
    return path, seed(path, lambda store: seed_long_run(store, TURNS))


@pytest.fixture(scope="module")
def client(long_run: tuple[Path, LongRun]) -> TestClient:
    return client_for(long_run[0])


@pytest.fixture(scope="module")
def pg_long(postgres_server: PostgresServer) -> Iterator[tuple[str, LongRun]]:
    """A PostgreSQL schema holding a PG_TURNS-turn run of the same kind."""
    name = schema_name("inspector_long", secrets.token_hex(4))
    url = postgres_server.new_schema_url(name)
    try:
        yield url, seed_pg(url, lambda store: seed_long_run(store, PG_TURNS))
    finally:
        postgres_server.drop_schema(name)


def stored(path: Path | str, run_id: str, step_id: str, sequence: int) -> tuple[Any, Any]:
    """An operation's input and record as ``Store.get_operation`` returns them, decoded."""

    async def read() -> tuple[Any, Any]:
        store = zincir.open_store(path)
        try:
            row = await store.get_operation(OperationKey(run_id, step_id, sequence))
        finally:
            await store.close()
        assert row is not None and row.record is not None
        record = decode_record(row.record)  # checked against its digest
        return json.loads(record.invocation.input_json), json.loads(row.record)

    return asyncio.run(read())


def section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}"')
    return page[start : page.index("</section>", start)]


def test_the_page_is_small_and_fast(client: TestClient, long_run: tuple[Path, LongRun]) -> None:
    _, run = long_run
    url = run_url(run.run_id)
    assert client.get(url).status_code == 200  # warm: templates compiled, usage summed
    times, sizes = [], []
    for _ in range(7):
        started = time.perf_counter()
        page = client.get(url)
        times.append(time.perf_counter() - started)
        sizes.append(len(page.content))
        assert page.status_code == 200
    median = statistics.median(times)
    print(f"\nrun page of {TURNS} turns: {sizes[-1]:,} bytes, median {median * 1000:.1f} ms")
    assert max(sizes) < MAX_PAGE_BYTES
    assert median < MAX_MEDIAN_S
    chat = section(page.text, "conversation")
    assert html.escape(turn_text(TURNS - 1)[:60]) in chat  # the latest turn
    assert html.escape(turn_text(TURNS - 40)[:60]) not in chat  # not the whole conversation
    older = conversation_url(run.run_id, 0).split("?")[0]
    assert f'<a class="load-older" href="{older}?before=' in chat
    ops = section(page.text, "operations")
    assert ops.count("<tr>") == OPERATION_PAGE + 1  # the head row and one page
    assert "older operations" in ops
    assert len(re.findall(r'<li id="e\d+" class="event', page.text)) == EVENT_PAGE_SIZE
    assert_inert(page.text)


def test_the_page_stays_small_when_tool_results_are_large(tmp_path: Path) -> None:
    """A coding agent's tool results are kilobytes each: texts, events and outcomes are cut
    on the page (each loads whole on demand), so it stays small."""
    path = tmp_path / "zincir.db"
    run = seed(path, lambda store: seed_long_run(store, 300, result_size=BIG_RESULT))
    page = client_for(path).get(run_url(run.run_id))
    print(f"\nrun page of 300 turns with {BIG_RESULT:,}-character results: {len(page.content):,}")
    assert page.status_code == 200 and len(page.content) < MAX_PAGE_BYTES
    assert result_text(run.turns - 2, BIG_RESULT) not in page.text


def test_the_page_reads_a_bounded_number_of_rows(long_run: tuple[Path, LongRun]) -> None:
    path, run = long_run
    counted: list[int] = []
    app = create_app(CountingView(open_read_only(path), counted), address=ADDRESS)
    client = TestClient(app, base_url=BASE_URL)
    assert client.get(run_url(run.run_id)).status_code == 200
    print(f"\nrows read for the run page: {sum(counted):,}")
    assert sum(counted) < MAX_ROWS_READ


def test_older_turns_page_back_to_the_prompt(
    client: TestClient, long_run: tuple[Path, LongRun]
) -> None:
    _, run = long_run
    check_older_turns(client, run)
    page = client.get(older_page(client, run.run_id)).text
    assert "Load older turns" in page and html.escape(PROMPT) not in page
    assert_inert(page)


def check_older_turns(client: TestClient, run: LongRun) -> None:
    """Following the older-turns links from the run page reads every turn once, in order,
    one bounded window at a time, back to the prompt."""
    detail = client.get(f"/api/runs/{run.run_id}").json()
    windows = [detail["conversation"]]
    older = detail["older_conversation"]
    while older is not None:
        body = client.get("/api" + older).json()
        assert body["last_seq"] - body["first_seq"] < CHAT_EVENTS
        windows.append(body["conversation"])
        older = body["older_conversation"]
    assert len(windows) > run.turns * 5 // CHAT_EVENTS  # ~5 events a turn, a window at a time
    entries = [entry for window in reversed(windows) for entry in window["entries"]]
    seqs = [entry["seq"] for entry in entries]
    assert seqs == sorted(set(seqs))  # each event once, in log order
    turns = [entry for entry in entries if entry["kind"] == "response"]
    assert [turn["content"] for turn in turns] == [turn_text(n) for n in range(run.turns)]
    results = [entry for entry in entries if entry["kind"] == "tool_result"]
    want = [result_text(n) for n in range(run.turns - 1)]
    assert [result["result"] for result in results] == want
    assert all(result["name"] == "note" for result in results)  # named across window edges
    first = windows[-1]["prompt"]
    assert [message["text"] for message in first["messages"]] == [INSTRUCTIONS, PROMPT]


def older_page(client: TestClient, run_id: str) -> str:
    """The HTML page of the window just before the run page's latest turns."""
    older = client.get(f"/api/runs/{run_id}").json()["older_conversation"]
    assert isinstance(older, str) and older.startswith("/conversation/")
    return older


@pytest.mark.parametrize(("step_id", "sequence"), [("model.request", 500), ("tool.call", 998_000)])
def test_an_operations_input_and_record_load_whole(
    client: TestClient, long_run: tuple[Path, LongRun], step_id: str, sequence: int
) -> None:
    path, run = long_run
    check_operation(client, path, run, step_id, sequence)


def check_operation(
    client: TestClient, location: Path | str, run: LongRun, step_id: str, sequence: int
) -> None:
    """An operation's input and record, loaded alone, whole and on its page, are the ones
    ``Store.get_operation`` returns."""
    want_input, want_record = stored(location, run.run_id, step_id, sequence)
    for part, want in (("input", want_input), ("record", want_record)):
        body = client.get(operation_url(run.run_id, step_id, sequence, part)).json()
        assert body["part"] == part and body["value"] == want
    whole = client.get(f"/api{operation_url(run.run_id, step_id, sequence)}").json()
    assert whole["input"] == want_input and whole["record"] == want_record
    page = client.get(operation_url(run.run_id, step_id, sequence))
    assert page.status_code == 200
    text = json.dumps(want_input, indent=2, ensure_ascii=False)
    assert str(escape(text)) in page.text  # escaped as the template escapes
    assert_inert(page.text)
    missing = client.get(f"/api{operation_url(run.run_id, step_id + '.x', sequence)}")
    assert missing.status_code == 404 and missing.json()["error"] == "Operation not found"


def test_the_operations_page_back(client: TestClient, long_run: tuple[Path, LongRun]) -> None:
    _, run = long_run
    first = client.get(f"/api/runs/{run.run_id}").json()
    assert first["operations_page"]["older"] == OPERATION_PAGE
    latest = [(op["step_id"], op["sequence"]) for op in first["operations"]]
    assert latest[-1] == ("tool.call", (TURNS - 1) * 1000) and len(latest) == OPERATION_PAGE
    assert all("input_json" not in op and "record" not in op for op in first["operations"])
    second = client.get(f"/api/runs/{run.run_id}?ops={OPERATION_PAGE}").json()
    before = [(op["step_id"], op["sequence"]) for op in second["operations"]]
    assert before[-1] == ("tool.call", (TURNS - OPERATION_PAGE // 2 - 1) * 1000)
    assert second["operations_page"]["newer"] == 0
    last = client.get(f"/api/runs/{run.run_id}?ops={TURNS * 2 - 10}").json()
    assert len(last["operations"]) == 10 and last["operations_page"]["older"] is None
    assert last["operations"][0]["sequence"] == 0


def test_the_failed_call_is_failed(client: TestClient, long_run: tuple[Path, LongRun]) -> None:
    _, run = long_run
    page = client.get(run_url(run.run_id)).text
    assert "in doubt" not in page and "Pending tool intents" not in page
    chat = section(page, "conversation")
    assert 'class="call call-failed"' in chat and FAILED_ERROR in chat
    detail = client.get(f"/api/runs/{run.run_id}").json()
    turn = [e for e in detail["conversation"]["entries"] if e["kind"] == "response"][-1]
    (call,) = turn["tool_calls"]
    assert call["id"] == run.failed_call and call["state"] == "failed"
    assert call["failure"]["error"] == FAILED_ERROR
    failed_op = detail["operations"][-1]
    assert (
        failed_op["outcome"] == "failure" and failed_op["outcome_detail"]["error"] == FAILED_ERROR
    )
    assert "badge outcome-failure" in section(page, "operations")
    intent = call["intent_seq"]  # in the event log's page that holds it, flagged failed
    log_page = client.get(f"{run_url(run.run_id)}?page={(intent - 1) // EVENT_PAGE_SIZE + 1}").text
    assert f'<li id="e{intent}" class="event flag-failed">' in log_page


def test_bad_cursors_are_refused(client: TestClient, long_run: tuple[Path, LongRun]) -> None:
    _, run = long_run
    base = conversation_url(run.run_id, 1).split("?")[0]
    for query in ("before=-1", "before=abc", "before=" + "9" * 30):
        assert client.get(f"{base}?{query}").status_code == 400
        assert client.get(f"/api{base}?{query}").json()["status"] == 400
    assert client.get(f"{run_url(run.run_id)}?ops=x").status_code == 400
    op = f"/api/operation/{run.run_id}"
    assert client.get(f"{op}?step_id=tool.call").status_code == 400  # no sequence
    assert client.get(f"{op}?sequence=1").status_code == 400  # no step
    assert client.get(f"{op}?step_id=tool.call&sequence=0&part=body").status_code == 400
    empty = client.get(f"/api{base}?before=0").json()
    assert empty["conversation"]["entries"] == [] and empty["older_conversation"] is None
    assert client.get("/conversation/no-such-run").status_code == 404
    for query in ("", "?seq=0", "?seq=x"):
        assert client.get(f"/api/event/{run.run_id}{query}").status_code == 400
    assert client.get(event_url(run.run_id, 10**9)).status_code == 404
    event = client.get(event_url(run.run_id, 3)).json()
    assert event["type"] == "llm_call" and event["value"]["content"] == turn_text(0)
    assert client.get("/api/operation/no-such-run?step_id=a&sequence=0").status_code == 404


def test_a_long_run_on_postgresql(pg_long: tuple[str, LongRun]) -> None:
    url, run = pg_long
    client = TestClient(create_app(url, address=ADDRESS), base_url=BASE_URL)
    page = client.get(run_url(run.run_id))
    assert page.status_code == 200 and len(page.content) < MAX_PAGE_BYTES
    chat = section(page.text, "conversation")
    assert 'class="call call-failed"' in chat and FAILED_ERROR in chat
    assert "in doubt" not in page.text
    check_older_turns(client, run)
    check_operation(client, url, run, "model.request", PG_TURNS // 2)
    check_operation(client, url, run, "tool.call", (PG_TURNS - 1) * 1000)
    older = client.get(f"/api/runs/{run.run_id}?ops={OPERATION_PAGE}").json()["operations"]
    last = (PG_TURNS - OPERATION_PAGE // 2 - 1) * 1000
    assert [(op["step_id"], op["sequence"]) for op in older][-1] == ("tool.call", last)


@pytest.mark.browser
def test_older_turns_and_a_record_load_in_a_real_browser(
    long_run: tuple[Path, LongRun], tmp_path_factory: pytest.TempPathFactory
) -> None:
    browser = require_chromium()
    path, run = long_run
    model_turns = "document.querySelectorAll('#conversation li.msg-model').length"
    earliest = "document.querySelector('#conversation li.msg-model pre').textContent"
    with (
        ui_server(path, tmp_path_factory.mktemp("server")) as base,
        chromium_page(browser, tmp_path_factory.mktemp("profile")) as page,
    ):
        page.open(base + run_url(run.run_id))
        shown = page.evaluate(model_turns)
        assert 20 <= shown <= 50
        assert page.evaluate(earliest).startswith(f"Turn {TURNS - shown}:")
        page.evaluate("document.querySelector('a.load-older').click()")
        page.wait_for(f"{model_turns} > {shown}")
        more = page.evaluate(model_turns)
        assert page.evaluate(earliest).startswith(f"Turn {TURNS - more}:")
        assert page.evaluate("document.querySelectorAll('#conversation li[id]').length") == len(
            set(
                page.evaluate(
                    "[...document.querySelectorAll('#conversation li[id]')].map(e => e.id)"
                )
            )
        )  # each item once
        box = "document.querySelector('#operations details.lazy[data-src$=\"part=record\"]')"
        src = page.evaluate(f"{box}.dataset.src")
        step_id, sequence = re.search(r"step_id=([^&]+)&sequence=(\d+)", src).groups()  # type: ignore[union-attr]
        assert page.evaluate(f"{box}.querySelector('pre').textContent").startswith("Loaded when")
        page.evaluate(f"{box}.open = true")
        page.wait_for(f"{box}.dataset.state === 'loaded'")
        shown_record = json.loads(page.evaluate(f"{box}.querySelector('pre').textContent"))
        assert shown_record == stored(path, run.run_id, step_id, int(sequence))[1]
        assert page.evaluate("document.title").endswith("zincir inspector")


class CountingView:
    """A read-only view whose snapshots count the rows their queries return."""

    def __init__(self, view: Any, counted: list[int]) -> None:
        self._view = view
        self._counted = counted
        self.path = view.path
        self.known_version = view.known_version

    def check(self) -> None:
        self._view.check()

    @contextmanager
    def snapshot(self) -> Iterator[Any]:
        with self._view.snapshot() as reader:
            yield CountingReader(reader, self._counted)


class CountingReader:
    def __init__(self, reader: Any, counted: list[int]) -> None:
        self._reader = reader
        self._counted = counted

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._reader, name)
        if not callable(found):
            return found

        def counting(*args: Any, **kwargs: Any) -> Any:
            value = found(*args, **kwargs)
            self._counted.append(len(value) if isinstance(value, list | set | dict) else 1)
            return value

        wrapped: Callable[..., Any] = counting
        return wrapped
