"""A real `zincir ui` process driven by headless Chromium: screenshots and inert stored text.

Needs /usr/bin/chromium (Debian package ``chromium``). Without it the tests skip, except under
CI (env ``CI`` set), where they fail: CI must install the browser.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.inspector.conftest import digest
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import Seeded
from tests.inspector.ui_process import ui_server
from zincir.inspector._app import run_url

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "inspector"
DOCS_SCREENSHOT = REPO / "docs" / "inspector-run.png"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def require_chromium() -> str:
    """The Chromium binary; fails under CI and skips elsewhere when it is missing."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return str(CHROMIUM)
    reason = f"{CHROMIUM} is missing: install the Debian package (apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests; {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def server(seeded: tuple[Path, Seeded], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`zincir ui` on the seeded database."""
    with ui_server(seeded[0], tmp_path_factory.mktemp("server")) as base:
        yield base


def chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once with an isolated profile and no network side traffic."""
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def screenshot(browser: str, profile: Path, url: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    done = chromium(browser, profile, f"--screenshot={target}", "--window-size=1280,900", url)
    assert target.is_file(), done.stderr[-2000:]
    data = target.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000  # a rendered page, not a blank


def dump_dom(browser: str, profile: Path, url: str) -> str:
    done = chromium(browser, profile, "--virtual-time-budget=3000", "--dump-dom", url)
    assert "<html" in done.stdout, done.stderr[-2000:]
    return done.stdout


def test_screenshots_of_the_run_list_and_a_run(
    server: str, seeded: tuple[Path, Seeded], tmp_path: Path
) -> None:
    browser = require_chromium()
    path, runs = seeded
    before = digest(path)
    screenshot(browser, tmp_path / "profile", server + "/", ARTIFACTS / "runs.png")
    run_shot = ARTIFACTS / "run.png"
    screenshot(browser, tmp_path / "profile", server + run_url(runs.in_doubt), run_shot)
    screenshot(browser, tmp_path / "profile", server + run_url(runs.xss), ARTIFACTS / "xss.png")
    assert run_shot.stat().st_size > 10_000, "the run page screenshot looks empty"
    if os.environ.get("ZINCIR_UPDATE_SCREENSHOT") == "1" or not DOCS_SCREENSHOT.exists():
        DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_shot, DOCS_SCREENSHOT)
    assert digest(path) == before


def test_stored_payloads_do_not_execute_in_a_real_browser(
    server: str, seeded: tuple[Path, Seeded], tmp_path: Path
) -> None:
    browser = require_chromium()
    _, runs = seeded
    for url in (server + "/", server + run_url(runs.xss), server + "/?status=failed"):
        dom = dump_dom(browser, tmp_path / "profile", url)
        title = re.search(r"<title>(.*?)</title>", dom, re.S)
        # an executed payload would have replaced the whole title with "pwned"
        assert title is not None and title.group(1).strip() != "pwned"
        assert title.group(1).endswith("zincir inspector")
        assert "(shown in " in dom  # our static script ran, so scripts were enabled
        assert "alert(1)</script>" not in dom
        assert_inert(dom)
