"""The built documentation site, served over HTTP and opened in headless Chromium.

The front page, a guide and an API page each load with status 200, show the site's
navigation, and log no error to the console; every file they ask the server for exists.
Needs /usr/bin/chromium (skipped without it, failed under CI: see tests/inspector).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.inspector.cdp import Browser, chromium_page
from tests.inspector.test_browser import PNG_MAGIC, require_chromium

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "docs"

PAGES = {
    "front page": "",
    "guide": "guides/agent-loop/",
    "API page": "api/agent/",
}

# Installed before any script of a page runs: what the console would show as an error (a
# console.error call, an uncaught exception or rejection, a file that failed to load) is
# kept in window.__errors for the test to read.
RECORD_ERRORS = """
window.__errors = [];
const keep = (kind, detail) => window.__errors.push(kind + ": " + detail);
const consoleError = console.error.bind(console);
console.error = (...args) => {
  keep("console.error", args.map(String).join(" "));
  consoleError(...args);
};
window.addEventListener("error", (event) => {
  const target = event.target;
  if (target && target !== window && (target.src || target.href)) {
    keep("failed to load", target.src || target.href);
  } else {
    keep("uncaught", event.message);
  }
}, true);
window.addEventListener("unhandledrejection", (event) => {
  keep("unhandled rejection", String(event.reason));
});
"""


def test_each_page_answers_200(site_server: tuple[str, list[tuple[str, int]]]) -> None:
    base, _ = site_server
    for name, path in PAGES.items():
        with urllib.request.urlopen(base + path, timeout=30) as answer:
            assert answer.status == 200, name
            assert "text/html" in answer.headers["Content-Type"], name


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    browser = require_chromium()
    with chromium_page(browser, tmp_path_factory.mktemp("chromium-profile")) as opened:
        opened.call("Page.addScriptToEvaluateOnNewDocument", source=RECORD_ERRORS)
        opened.call(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        yield opened


def load(page: Browser, base: str, served: list[tuple[str, int]], path: str) -> None:
    """Open ``base + path`` and wait until its search index is fetched too (the last file a
    page asks for), so a late error is seen."""
    before = len(served)
    page.open(base + path)
    deadline = time.monotonic() + 30
    while not any(p.endswith("search_index.json") for p, _ in served[before:]):
        assert time.monotonic() < deadline, "the page never fetched its search index"
        time.sleep(0.05)
    page.evaluate("new Promise((done) => setTimeout(done, 200))")


@pytest.mark.browser
@pytest.mark.parametrize("name", PAGES)
def test_page_shows_the_navigation_and_no_console_error(
    name: str, page: Browser, site_server: tuple[str, list[tuple[str, int]]]
) -> None:
    base, served = site_server
    before = len(served)
    load(page, base, served, PAGES[name])

    title = page.evaluate("document.querySelector('article h1')?.textContent.trim() ?? ''")
    assert title, f"{name}: no title"
    tabs = page.evaluate(
        "[...document.querySelectorAll('.md-tabs__link')].map(a => a.textContent.trim())"
    )
    assert {"Guides", "API reference"} <= set(tabs), f"{name}: the navigation tabs: {tabs}"
    links = page.evaluate("document.querySelectorAll('nav.md-nav--primary a.md-nav__link').length")
    assert links > 20, f"{name}: the side navigation has {links} links"

    errors = page.evaluate("window.__errors")  # mkdocs.yml's font: false: nothing offsite
    assert errors == [], f"{name}: {json.dumps(errors, indent=2)}"
    missing = [(p, status) for p, status in served[before:] if status >= 400]
    assert missing == [], f"{name}: files the page asked for and did not get: {missing}"


@pytest.mark.browser
def test_screenshot_of_the_front_page(
    page: Browser, site_server: tuple[str, list[tuple[str, int]]]
) -> None:
    """test-artifacts/docs/site-front-page.png: what a reader sees first."""
    base, served = site_server
    load(page, base, served, "")
    data = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000  # a rendered page, not a blank
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "site-front-page.png").write_bytes(data)
