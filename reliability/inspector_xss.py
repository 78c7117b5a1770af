"""Inspector: the OWASP XSS filter-evasion payloads, stored everywhere, never executed.

The payloads of ``data/xss_corpus.txt`` are stored through zincir's public API into every
field the inspector shows, then a real ``zincir ui`` process serves them and headless
Chromium renders every page twice: as served (with the inspector's Content-Security-Policy)
and with CSP bypassed, so escaping alone must hold. A hook installed before any page script
counts ``alert``/``confirm``/``prompt``/``print`` calls and dialogs (a control page proves it
fires), and each DOM is audited for payload elements (event handlers, ``javascript:`` URLs,
foreign scripts, frames). Then every route gets every HTTP method, from the inspector's own
Host and a foreign one, and the database file and its WAL must keep their bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import quote

import httpx

import zincir
from reliability._harness import Report, at_least, equal
from reliability._xss_browser import CHROMIUM, Browser, PageResult
from reliability._xss_seed import Seeded, load_corpus, seed
from tests.inspector.ui_process import ui_server

ORDER = 10
TITLE = "Inspector: stored XSS and read-only routes"

REPO = Path(__file__).resolve().parents[1]
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
CONTROL_PAGE = (
    "data:text/html,<title>control</title><script>alert(1)</script><img src=x onerror=confirm(2)>"
)


def _seed(path: Path, groups: list[list[str]]) -> Seeded:
    async def main() -> Seeded:
        store = zincir.open_store(path, synchronous="normal")
        try:
            return await seed(store, groups)
        finally:
            await store.close()

    return asyncio.run(main())


def pages_of(seeded: Seeded) -> list[tuple[str, str]]:
    """Every HTML page of the seeded database (the lists, each run and each thread), each
    with the text it must show ("" for the lists)."""
    lists = ["/", "/?status=failed", "/?status=running", "/?status=completed", "/threads"]
    runs = [("/runs/" + quote(run_id, safe=""), seeded.probes[run_id]) for run_id in seeded.runs]
    threads = [
        ("/threads/" + quote(thread_id, safe=""), seeded.probes[thread_id])
        for thread_id in seeded.threads
    ]
    return [*((page, "") for page in lists), *runs, *threads]


def routes_of(seeded: Seeded) -> list[str]:
    """One path per route of the inspector (plus a missing page and a static file)."""
    run = quote(seeded.runs[0], safe="")
    thread = quote(seeded.threads[0], safe="") if seeded.threads else "none"
    return [
        "/",
        "/?status=failed",
        f"/runs/{run}",
        f"/runs/{run}?after_seq=2",
        "/api/runs",
        f"/api/runs/{run}",
        "/threads",
        f"/threads/{thread}",
        "/api/threads",
        f"/api/threads/{thread}",
        "/static/inspector.css",
        "/static/local-time.js",
        "/runs/" + quote("<script>alert(1)</script>", safe=""),
        "/nowhere",
    ]


def _files_digest(db: Path) -> tuple[str | None, ...]:
    """sha256 of the database file and its -wal (the -shm is the readers' shared index)."""
    found: list[str | None] = []
    for path in (db, Path(f"{db}-wal")):
        found.append(hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None)
    return tuple(found)


def probe_routes(base: str, db: Path, routes: list[str]) -> tuple[int, int, list[str]]:
    """Every route × method × Host: (requests, routes after which the files changed,
    mutating or foreign requests that were not refused)."""
    port = base.rsplit(":", 1)[1]
    hosts = (f"127.0.0.1:{port}", "evil.example", f"localhost.evil.example:{port}")
    requests = writes = 0
    unrefused: list[str] = []
    with httpx.Client(base_url=base, timeout=10) as client:
        for route in routes:
            before = _files_digest(db)
            for method in METHODS:
                for host in hosts:
                    body = b"status=cancelled" if method not in ("GET", "HEAD") else None
                    response = client.request(method, route, headers={"host": host}, content=body)
                    requests += 1
                    own = host == hosts[0]
                    expected = {200, 404, 400} if own and method in ("GET", "HEAD") else {403, 405}
                    if response.status_code not in expected:
                        unrefused.append(f"{method} {route} Host {host}: {response.status_code}")
            if _files_digest(db) != before:
                writes += 1
    return requests, writes, unrefused


def render_all(
    browser: Browser, base: str, pages: list[tuple[str, str]], settle: float
) -> tuple[list[PageResult], list[PageResult]]:
    """Each page as served, then with CSP bypassed."""
    served = [
        browser.render(base + page, bypass_csp=False, settle=settle, probe=probe)
        for page, probe in pages
    ]
    bare = [browser.render(base + page, bypass_csp=True, settle=settle) for page, _ in pages]
    return served, bare


def run(short: bool) -> Report:
    """Seed, render every page in Chromium, send every method to every route."""
    report = Report("inspector_xss", TITLE, short=short)
    payloads = load_corpus()
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        report.figures = [equal("Chromium available", "missing", str(CHROMIUM))]
        report.notes = ["install the Debian package chromium to run this scenario"]
        return report
    group_count = 2 if short else len(payloads)
    groups = [payloads[index::group_count] for index in range(group_count)]
    with tempfile.TemporaryDirectory(prefix="zincir-xss-") as temp:
        folder = Path(temp)
        db = folder / "zincir.db"
        seeded = _seed(db, groups)
        pages = pages_of(seeded)
        browser = Browser(folder / "profile", "http://127.0.0.1:")
        try:
            control = browser.render(CONTROL_PAGE, bypass_csp=True)
            with ui_server(db, folder) as base:
                before = _files_digest(db)
                served, bare = render_all(browser, base, pages, 0.05 if short else 0.2)
                requests, writes, unrefused = probe_routes(base, db, routes_of(seeded))
                after = _files_digest(db)
        finally:
            browser.close()
    rendered = [*served, *bare]
    executed = [f"{page.url}: {hit}" for page in rendered for hit in page.executed]
    live = [f"{page.url}: {element}" for page in rendered for element in page.live_elements]
    report.figures = [
        at_least("payloads (OWASP XSS filter evasion)", len(payloads), 150),
        at_least("pages rendered (as served + CSP bypassed)", len(rendered), 2 * len(pages)),
        at_least("execution detector fired on the control page", len(control.executed), 2),
        at_least(
            "DOM audit found the control page's payload elements", len(control.live_elements), 2
        ),
        equal("payloads executed", len(executed), 0),
        equal("payload elements live in a DOM", len(live), 0),
        equal("run pages where the inspector's own script did not run", _silent(served), 0),
        equal("run and thread pages not showing their payloads as text", _blank(served), 0),
        at_least("route × method × Host requests", requests, 14 * len(METHODS) * 3),
        equal("requests not refused (mutating: 405, foreign Host: 403)", len(unrefused), 0),
        equal("writes (database or WAL bytes changed)", writes + (after != before), 0),
    ]
    report.notes = [
        f"{len(payloads)} payloads in {group_count} groups; {len(seeded.runs)} runs and "
        f"{len(seeded.threads)} LangGraph threads seeded through the public API; "
        f"{len(pages)} pages, each rendered as served and with CSP bypassed.",
        "Fields the payloads were stored in: " + _fields() + ".",
        f"Requests the payloads tried to send elsewhere, failed inside the browser: "
        f"{sum(page.blocked_requests for page in rendered)}.",
        *executed[:5],
        *live[:5],
        *unrefused[:5],
    ]
    return report


def _fields() -> str:
    return (
        "run id, name, provider, app version, config, result, last error; responses, stop "
        "reasons, tool call ids, names, arguments, results, pending intents; checkpoint "
        "candidates and evidence; steps, timers, messages, child runs; model request and "
        "response documents, operation failures and suspensions; restart checkpoints; "
        "LangGraph thread ids, values, metadata and writes"
    )


def _silent(pages: list[PageResult]) -> int:
    """Run and list pages whose local-time script left no trace (scripts must be on)."""
    return sum(1 for page in pages if "/runs/" in page.url and not page.own_script_ran)


def _blank(pages: list[PageResult]) -> int:
    """Run and thread pages that do not show payload text: the seeding did not reach them."""
    shown = ("/runs/", "/threads/")
    return sum(
        1 for page in pages if any(p in page.url for p in shown) and not page.shows_payload_text
    )
