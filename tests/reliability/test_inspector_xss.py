"""The inspector scenario at short counts: no stored payload executes, no request writes.

Needs /usr/bin/chromium (Debian package ``chromium``): skipped without it, except under CI
(env ``CI`` set), where the scenario's own figure fails.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("starlette", reason='the inspector needs the "ui" extra')

from reliability import inspector_xss  # noqa: E402
from reliability._xss_browser import CHROMIUM  # noqa: E402

pytestmark = pytest.mark.browser


def test_stored_xss_never_executes_and_no_route_writes() -> None:
    if not os.access(CHROMIUM, os.X_OK) and not os.environ.get("CI"):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    report = inspector_xss.run(short=True)
    assert report.ok, [*report.failures(), *report.notes]
