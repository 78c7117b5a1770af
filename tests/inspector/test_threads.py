"""LangGraph threads in the inspector: the list, a thread's page and their JSON, over a
database holding rows as zincir's saver stores them (see seed_threads).

Stored text is escaped everywhere, only ``json`` values are previewed (a msgpack value is
never decoded), an unknown thread is a 404, reading never changes the file, and a database
from before the LangGraph tables shows an empty list.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import client_for, digest
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import XSS_CLOSE, XSS_IMG, XSS_SCRIPT, XSS_URL
from tests.inspector.seed_threads import (
    ALL,
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
from zincir.inspector._threads import thread_url
from zincir.store.sqlite import ReadOnlyDatabase
from zincir.store.sqlite._readonly import PREVIEW_BYTES


@pytest.fixture(scope="module")
def threads_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("threads") / "zincir.db"
    seed_threads(path)
    return path


@pytest.fixture(scope="module")
def client(threads_db: Path) -> TestClient:
    return client_for(threads_db)


def api(thread_id: str) -> str:
    return "/api" + thread_url(thread_id)


def test_the_list_shows_every_thread_newest_first(client: TestClient) -> None:
    page = client.get("/threads")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == "default-src 'self'"
    for thread_id in ALL:
        assert f'href="{thread_url(thread_id)}"' in page.text
    assert "held by" in page.text and "worker-a" in page.text
    assert 'href="/threads" class="active"' in page.text  # the header's view links
    assert_inert(page.text)

    body = client.get("/api/threads").json()
    assert [row["thread_id"] for row in body["threads"]] == [BIG, PACKED, XSS_THREAD, PLAIN]
    plain = body["threads"][-1]
    assert plain["checkpoints"] == 4 and plain["namespaces"] == ["", "child:task-1"]
    assert plain["latest_checkpoint_id"] == checkpoint_id(4)
    assert plain["latest_checkpoint_ns"] == "child:task-1" and plain["pending_writes"] == 1
    assert plain["lease"]["state"] == "held" and plain["lease_token"] == 3
    assert plain["url"] == thread_url(PLAIN)
    packed = body["threads"][1]
    assert packed["lease"]["state"] == "none" and packed["lease_token"] == 2  # released


def test_the_run_list_links_to_the_threads(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert 'href="/threads"' in page.text and 'href="/" class="active"' in page.text


def test_a_thread_page_shows_checkpoints_parents_metadata_and_pending_writes(
    client: TestClient,
) -> None:
    page = client.get(thread_url(PLAIN))
    assert page.status_code == 200
    text = page.text
    for n in (1, 2, 3, 4):
        assert checkpoint_id(n) in text
    assert text.count('<tr id="cp-') == 4
    assert '<a href="#cp-2"><code class="small">' + checkpoint_id(2) in text  # 3's parent
    assert "&#34;run_id&#34;: &#34;lg-run-1&#34;" in text  # metadata, pretty and escaped
    assert "source loop" in text and "child:task-1" in text
    assert "&#34;say&#34;: &#34;hello&#34;" in text  # a json pending write, pretty
    assert "__interrupt__" in text and "msgpack · 23 B · not decoded" in text
    assert "null · 0 B · not decoded" in text and "bytes · 16 B · not decoded" in text
    assert "task-old" not in text  # a write of an older checkpoint is not pending
    assert MSGPACK_SECRET not in text and RAW_SECRET not in text
    assert_inert(text)


def test_the_thread_api(client: TestClient) -> None:
    body = client.get(api(PLAIN)).json()
    assert body["thread"]["thread_id"] == PLAIN and body["row_limit"] == 500
    ids = [(c["checkpoint_ns"], c["checkpoint_id"]) for c in body["checkpoints"]]
    assert ids == [("child:task-1", checkpoint_id(4))] + [("", checkpoint_id(n)) for n in (3, 2, 1)]
    newest = body["checkpoints"][1]
    assert newest["parent_checkpoint_id"] == checkpoint_id(2) and newest["writes"] == 5
    assert newest["metadata"] == {"source": "loop", "step": 2, "run_id": "lg-run-1"}
    assert newest["run_id"] == "lg-run-1" and newest["type"] == "json"
    assert "checkpoint" not in newest and "preview" not in newest  # values are not listed
    root, child = body["latest"]
    assert (root["checkpoint_ns"], root["checkpoint_id"]) == ("", checkpoint_id(3))
    assert root["preview_kind"] == "json"
    assert root["preview"]["channel_values"] == {"messages": ["hi", "hi", "hi"]}
    writes = {(w["task_id"], w["idx"]): w for w in root["pending_writes"]}
    assert list(writes) == [
        ("task-a", 0),
        ("task-a", 1),
        ("task-b", -3),
        ("task-b", 0),
        ("task-b", 1),
    ]
    assert writes["task-a", 0]["preview"] == {"say": "hello"}
    assert writes["task-a", 0]["task_path"] == "~a" and writes["task-a", 0]["channel"] == "messages"
    packed = writes["task-a", 1]
    assert packed["type"] == "msgpack" and packed["size"] == 23
    assert packed["preview"] is None and packed["preview_kind"] == "none"
    assert [w["channel"] for w in child["pending_writes"]] == ["inner"]


def test_msgpack_and_bytes_are_never_decoded(client: TestClient) -> None:
    for path in (
        thread_url(PLAIN),
        api(PLAIN),
        thread_url(PACKED),
        api(PACKED),
        "/threads",
        "/api/threads",
    ):
        response = client.get(path)
        assert response.status_code == 200
        assert MSGPACK_SECRET not in response.text and RAW_SECRET not in response.text
    (head,) = client.get(api(PACKED)).json()["latest"]
    assert head["type"] == "msgpack" and head["preview"] is None and head["size"] == 23


def test_a_long_json_value_is_previewed_from_its_first_bytes(client: TestClient) -> None:
    body = client.get(api(BIG)).json()
    (head,) = body["latest"]
    (write,) = head["pending_writes"]
    for value in (head, write):
        assert value["preview_kind"] == "text" and value["size"] > 200_000
        assert len(value["preview"]) == PREVIEW_BYTES
    assert BIG_TAIL not in client.get(api(BIG)).text
    page = client.get(thread_url(BIG)).text
    assert "first bytes as text" in page and BIG_TAIL not in page
    assert len(page) < 50_000  # the page shows a head, not 200 kB


def test_stored_xss_is_inert_on_every_thread_page(client: TestClient) -> None:
    page = client.get(thread_url(XSS_THREAD))
    assert page.status_code == 200
    text = page.text
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;/x?y#z" in text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text  # a json write
    assert "&lt;img src=x onerror=" in text  # a namespace, a channel, metadata
    assert XSS_URL in text  # as text, never as a link
    assert "not strict JSON" in text  # invalid UTF-8 in a json value, shown as text
    assert_inert(text)
    body = client.get(api(XSS_THREAD)).json()
    assert body["thread"]["thread_id"] == XSS_THREAD
    assert body["checkpoints"][-1]["metadata"]["source"] == XSS_SCRIPT
    write = next(w for w in body["latest"][0]["pending_writes"] if w["task_id"] == XSS_SCRIPT)
    assert write["channel"] == XSS_IMG and write["preview"]["evil"] == XSS_CLOSE


def test_an_unknown_thread_is_404(client: TestClient) -> None:
    for thread_id in ("no-such-thread", XSS_SCRIPT, ""):
        page = client.get(thread_url(thread_id))
        assert page.status_code == 404 and "Thread not found" in page.text
        assert page.headers["content-security-policy"] == "default-src 'self'"
        assert_inert(page.text)
        body = client.get(api(thread_id))
        assert body.status_code == 404 and body.json()["error"] == "Thread not found"


def test_thread_routes_get_the_host_check_and_get_only(client: TestClient) -> None:
    for path in ("/threads", thread_url(PLAIN), "/api/threads", api(PLAIN)):
        assert client.get(path, headers={"host": "evil.example"}).status_code == 403
        assert client.post(path, content=b"x").status_code == 405
        assert client.delete(path).status_code == 405


def test_reading_threads_never_changes_the_file(threads_db: Path) -> None:
    before = digest(threads_db)
    client = client_for(threads_db)
    for thread_id in (*ALL, "missing"):
        client.get(thread_url(thread_id))
        client.get(api(thread_id))
    client.get("/threads")
    client.get("/api/threads")
    assert digest(threads_db) == before
    wal = Path(f"{threads_db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_database_from_before_the_threads_tables_has_none(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    seed_threads(path)
    conn = apsw.Connection(str(path))  # back to schema 8: no LangGraph tables
    conn.execute(
        "DROP TABLE langgraph_checkpoints; DROP TABLE langgraph_writes; "
        "DROP TABLE langgraph_thread_leases; DELETE FROM schema_migrations WHERE version >= 9;"
    )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = digest(path)
    client = client_for(path)
    page = client.get("/threads")
    assert page.status_code == 200 and "No LangGraph threads" in page.text
    assert client.get("/api/threads").json()["threads"] == []
    assert client.get(thread_url(PLAIN)).status_code == 404
    assert client.get(api(PLAIN)).status_code == 404
    with ReadOnlyDatabase(path).snapshot() as reader:
        assert reader.thread_checkpoints(PLAIN) == [] and reader.thread_heads(PLAIN) == []
        assert reader.thread_writes(PLAIN, "", checkpoint_id(3)) == []
    assert digest(path) == before


def test_a_database_without_threads_shows_an_empty_list(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    zincir.open_store(path).close_sync()
    page = client_for(path).get("/threads")
    assert page.status_code == 200 and "No LangGraph threads" in page.text
