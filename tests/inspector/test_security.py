"""The inspector's guards: loopback only, Host check, GET only, escaping, strictly read-only."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import ADDRESS, client_for, digest
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import Seeded, seed_agent_runs
from zincir import InvalidInput, NotAZincirDatabase
from zincir.inspector import UIAddress, create_app, parse_address, ui_command
from zincir.inspector import _cli as inspector_cli
from zincir.inspector._app import run_url

REPO = Path(__file__).resolve().parents[2]
Fixture = tuple[Path, Seeded]
EXPECTED_HEADERS = {
    "content-security-policy": "default-src 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def assert_security_headers(response: Any) -> None:
    for name, value in EXPECTED_HEADERS.items():
        assert response.headers.get(name) == value, (name, response.status_code)


# -- addresses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        (None, "127.0.0.1", 8787),
        ("", "127.0.0.1", 8787),
        ("127.0.0.2:9000", "127.0.0.2", 9000),
        ("[::1]:8787", "::1", 8787),
        ("localhost:8800", "127.0.0.1", 8800),
        ("LOCALHOST", "127.0.0.1", 8787),
        (":9000", "127.0.0.1", 9000),
        ("127.0.0.1", "127.0.0.1", 8787),
        ("::1", "::1", 8787),
        ("[::1]", "::1", 8787),
        (" 127.255.255.254:65535 ", "127.255.255.254", 65535),
    ],
)
def test_loopback_addresses_are_accepted(text: str | None, host: str, port: int) -> None:
    assert parse_address(text) == UIAddress(host, port)


@pytest.mark.parametrize(
    "text",
    [
        "0.0.0.0:8787",
        "192.168.1.5:80",
        "10.0.0.1",
        "[::]:8787",
        "::",
        "8.8.8.8:53",
        "example.com:80",
        "localhost.evil.example:80",
        "127.0.0.1.nip.io:80",
        "127.1:80",
        "2130706433:80",
        "0x7f.0.0.1:80",
        "[::ffff:127.0.0.1]:80",
        "[fe80::1%eth0]:80",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:http",
        "127.0.0.1:",
        "[::1",
        "[::1]x",
        "[::1]:",
        "127.0.0.1:80:90",
    ],
)
def test_other_addresses_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="loopback"):
        parse_address(text)


def test_allowed_host_headers() -> None:
    assert parse_address(None).allowed_hosts() == {"127.0.0.1:8787", "localhost:8787"}
    assert parse_address("127.0.0.2:9000").allowed_hosts() == {"127.0.0.2:9000"}
    assert parse_address("[::1]:8787").allowed_hosts() == {"[::1]:8787", "localhost:8787"}
    assert parse_address(":80").allowed_hosts() == {
        "127.0.0.1:80",
        "localhost:80",
        "127.0.0.1",
        "localhost",
    }


def run_ui(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``zincir ui`` in a real process (it would block serving if it ever bound)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **env}
    return subprocess.run(
        [sys.executable, "-c", "from zincir.inspector import ui_command; ui_command()", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("address", ["0.0.0.0:8787", "192.168.1.5:80", "[::]:9000"])
def test_non_loopback_address_exits_before_binding(
    address: str, seeded: tuple[Path, Seeded], tmp_path: Path
) -> None:
    done = run_ui(["--db", str(seeded[0])], {"ZINCIR_UI_ADDRESS": address}, tmp_path)
    assert done.returncode != 0
    assert "not a loopback address" in done.stderr and "ZINCIR_UI_ADDRESS" in done.stderr
    assert "Uvicorn running" not in done.stderr + done.stdout


def test_address_is_checked_before_anything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    monkeypatch.setenv("ZINCIR_UI_ADDRESS", "0.0.0.0:8787")
    result = CliRunner().invoke(ui_command, ["--db", str(tmp_path / "missing.db")])
    assert result.exit_code != 0 and "loopback" in result.output


# -- requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8787",
        "127.0.0.1:8788",
        "127.0.0.2:8787",
        "[::1]:8787",
        "localhost:8788",
        "localhost",
        "127.0.0.1",
        "127.0.0.1:8787.evil.example",
        "",
    ],
)
def test_foreign_host_is_403(client: TestClient, host: str) -> None:
    for path in ("/", "/api/runs", "/static/inspector.css", "/runs/x"):
        response = client.get(path, headers={"host": host})
        assert response.status_code == 403, (host, path)
        assert "Forbidden" in response.text
        assert_security_headers(response)


@pytest.mark.parametrize("host", ["127.0.0.1:8787", "localhost:8787", "LOCALHOST:8787"])
def test_own_host_is_served(client: TestClient, host: str) -> None:
    assert client.get("/", headers={"host": host}).status_code == 200


def test_missing_host_header_is_403(seeded: tuple[Path, Seeded]) -> None:
    app = create_app(seeded[0], address=ADDRESS)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "headers": [],
        "http_version": "1.0",
        "scheme": "http",
        "server": ("127.0.0.1", 8787),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
        "asgi": {"version": "3.0"},
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 403


def test_ipv6_bound_inspector_checks_its_own_host(seeded: tuple[Path, Seeded]) -> None:
    client = TestClient(create_app(seeded[0], address="[::1]:9000"), base_url="http://[::1]:9000")
    assert client.get("/").status_code == 200
    assert client.get("/", headers={"host": "localhost:9000"}).status_code == 200
    assert client.get("/", headers={"host": "127.0.0.1:9000"}).status_code == 403


@pytest.mark.parametrize(
    "method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND", "CONNECT"]
)
def test_every_other_method_is_405(client: TestClient, method: str, seeded: Fixture) -> None:
    for path in (
        "/",
        "/api/runs",
        f"/api/runs/{seeded[1].completed}",
        run_url(seeded[1].completed),
        "/static/inspector.css",
        "/nowhere",
    ):
        response = client.request(method, path, content=b"status=cancelled")
        assert response.status_code == 405, (method, path)
        assert response.headers["allow"] == "GET, HEAD"
        assert_security_headers(response)


def test_security_headers_on_every_response(client: TestClient, seeded: Fixture) -> None:
    responses = [
        client.get("/"),
        client.get("/api/runs"),
        client.get(run_url(seeded[1].completed)),
        client.get(f"/api/runs/{seeded[1].completed}"),
        client.get("/static/inspector.css"),
        client.get("/static/local-time.js"),
        client.get("/runs/missing"),
        client.get("/api/runs/missing"),
        client.get("/nowhere"),
        client.get(run_url(seeded[1].completed) + "?page=x"),
        client.head("/"),
    ]
    assert sorted({r.status_code for r in responses}) == [200, 400, 404]
    for response in responses:
        assert_security_headers(response)


# -- stored text is inert -----------------------------------------------------------------


def test_stored_xss_payloads_are_escaped_everywhere(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    pages = [
        "/",
        "/?status=failed",
        run_url(runs.xss),
        run_url(runs.xss) + "?page=1",
        run_url(runs.xss) + "?page=7",
        "/runs/" + "%3Cscript%3E",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code in (200, 404)
        assert_inert(response.text)
    text = client.get(run_url(runs.xss)).text
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "javascript:alert(1)" in text  # shown as text, never as a link
    api = client.get(f"/api/runs/{run_url(runs.xss)[6:]}")
    assert api.headers["content-type"] == "application/json"
    assert api.json()["config"]["note"] == "<script>document.title='pwned'</script>"


# -- strictly read-only -------------------------------------------------------------------


def browse(client: TestClient, runs: Seeded) -> None:
    """Every page and API view of every run, plus refused requests."""
    for path in ("/", "/?status=running", "/api/runs", "/api/runs?status=failed", "/nowhere"):
        client.get(path)
    for run_id in runs.all:
        client.get(run_url(run_id))
        client.get(run_url(run_id) + "?page=2")
        client.get("/api/runs/" + run_url(run_id)[6:])
    client.post("/", content=b"x")
    client.delete(run_url(runs.completed))
    client.get("/", headers={"host": "evil.example"})


async def test_browsing_leaves_database_and_wal_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    wal = Path(f"{path}-wal")
    store = zincir.open_store(path)
    try:
        runs = await seed_agent_runs(store, keep_lease=False)
        assert wal.stat().st_size > 0  # the log still holds the seeded commits
        before = digest(path), digest(wal)
        browse(client_for(path), runs)
        assert (digest(path), digest(wal)) == before
    finally:
        await store.close()
    closed = digest(path)
    browse(client_for(path), runs)
    assert digest(path) == closed
    assert not wal.exists() or wal.stat().st_size == 0


def test_missing_database_is_not_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZINCIR_DATABASE_PATH", raising=False)
    missing = tmp_path / "missing.db"
    with pytest.raises(NotAZincirDatabase, match="zincir demo"):
        create_app(missing)
    runner = CliRunner()
    for args, env in (
        (["--db", str(missing)], {}),
        (["--db", f"sqlite:///{missing}"], {}),
        ([], {"ZINCIR_DATABASE_PATH": str(missing)}),
        ([], {}),  # ./zincir.db
    ):
        result = runner.invoke(ui_command, args, env=env)
        assert result.exit_code != 0, args
        assert "zincir demo" in result.output and "no database" in result.output
    assert list(tmp_path.iterdir()) == []


def test_missing_database_exits_nonzero_in_a_real_process(tmp_path: Path) -> None:
    done = run_ui(["--db", "missing.db"], {"ZINCIR_UI_ADDRESS": "127.0.0.1:8787"}, tmp_path)
    assert done.returncode != 0 and "zincir demo" in done.stderr
    assert list(tmp_path.iterdir()) == []


def make_foreign_db(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')")
    conn.close()


@pytest.mark.parametrize("kind", ["other-schema", "empty-file", "not-sqlite", "half-zincir"])
def test_database_without_zincir_schema_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    path = tmp_path / "other.db"
    if kind == "other-schema":
        make_foreign_db(path)
    elif kind == "empty-file":
        path.write_bytes(b"")
    elif kind == "not-sqlite":
        path.write_text("just some text, not a database\n" * 40)
    else:
        conn = apsw.Connection(str(path))
        conn.execute("CREATE TABLE agent_runs (id TEXT); CREATE TABLE events (run_id TEXT)")
        conn.close()
    before = digest(path)
    files = sorted(tmp_path.iterdir())
    result = CliRunner().invoke(ui_command, ["--db", str(path)])
    assert result.exit_code != 0
    assert "zincir" in result.output and ("schema" in result.output or "not an" in result.output)
    with pytest.raises(NotAZincirDatabase):
        create_app(path)
    assert digest(path) == before and sorted(tmp_path.iterdir()) == files


def test_import_without_the_extra_names_it() -> None:
    code = "import sys; sys.modules['starlette'] = None; import zincir.inspector"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=60,
    )
    assert done.returncode != 0
    assert "ImportError" in done.stderr and 'pip install "zincir[ui]"' in done.stderr


def test_core_package_never_imports_the_web_stack() -> None:
    code = (
        "import sys, zincir; web = {'starlette', 'uvicorn', 'jinja2'} & set(sys.modules); "
        "print(sorted(web)); sys.exit(1 if web else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "path",
    [
        "/static/../_app.py",
        "/static/..%2f_app.py",
        "/static/%2e%2e/_db.py",
        "/static/templates/base.html",
        "/static/",
        "/static",
    ],
)
def test_static_files_stay_inside_the_static_folder(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404, path
    assert "import" not in response.text


def test_schema_too_new_warns_and_still_serves_a_readable_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zincir.store.sqlite import _base

    path = tmp_path / "future.db"
    known = _base.migrations()
    with monkeypatch.context() as patch:  # a newer zincir migrated this file
        patch.setattr(
            _base, "migrations", lambda: [*known, (known[-1][0] + 1, "future", "SELECT 1;")]
        )
        zincir.open_store(path).close_sync()
    served: list[Any] = []
    monkeypatch.setattr(inspector_cli, "serve", lambda *args: served.append(args))
    result = CliRunner().invoke(ui_command, ["--db", str(path)])
    assert result.exit_code == 0 and "newer than this zincir" in result.output
    assert len(served) == 1


def test_an_unexpected_failure_is_a_plain_500_page(seeded: tuple[Path, Seeded]) -> None:
    from zincir.inspector import InspectorDatabase

    class Broken(InspectorDatabase):
        broken = False

        def snapshot(self) -> Any:
            if self.broken:
                raise RuntimeError("boom <script>")
            return super().snapshot()

    database = Broken(seeded[0])
    app = create_app(database, address=ADDRESS)
    database.broken = True
    client = TestClient(app, base_url="http://127.0.0.1:8787", raise_server_exceptions=False)
    response = client.get("/")
    assert response.status_code == 500
    assert "Internal error" in response.text and "RuntimeError" in response.text
    assert "Traceback" not in response.text and "boom" not in response.text
    assert_security_headers(response)
