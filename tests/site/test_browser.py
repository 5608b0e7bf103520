"""The report in a real browser: Debian's headless ``chromium`` driven by Playwright's Python API.

Checks what a reviewer relies on: one row per patch with the right status, a click shows that
patch's diff, the bisect chart is drawn (non-empty boxes), and opening the page from the file
system makes no request at all (every request is recorded; anything but the page itself fails the
test, and is aborted so nothing leaves the machine). Marked ``browser``; ``.ci/run`` installs
``chromium`` and Playwright, elsewhere the test skips and says why.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import NAMES, STATUSES, Project

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the report-test extra)")
    with sync_api.sync_playwright() as p:
        yield p


def test_report_in_headless_chromium(project: Project, chromium, tmp_path: Path) -> None:
    project.run("report")
    index = project.root / "build/report/index.html"
    url = index.resolve().as_uri()
    context = chromium.chromium.launch_persistent_context(
        str(tmp_path / "profile"),  # a fresh --user-data-dir
        executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1400, "height": 1000},
    )
    requests: list[str] = []
    try:
        context.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        context.on("request", lambda request: requests.append(request.url))
        page = context.new_page()
        page.goto(url, wait_until="load")

        rows = page.locator("tr.patch")
        assert rows.count() == len(NAMES)
        assert [rows.nth(i).get_attribute("data-patch") for i in range(rows.count())] == NAMES
        for i, name in enumerate(NAMES):
            assert rows.nth(i).locator(".badge").first.inner_text() == STATUSES[name]

        diff = page.locator("#diff-0003-scheduler-sync")
        assert diff.is_hidden()
        page.locator("#patch-0003-scheduler-sync").click()
        assert diff.is_visible()
        assert "return False  # <script>alert(1)</script>" in diff.inner_text()
        assert page.locator("#diff-0001-sdpa-streaming").is_hidden()
        page.locator("#patch-0003-scheduler-sync").click()
        assert diff.is_hidden()

        chart = page.locator("#bisect-chart")
        assert chart.is_visible()
        box = chart.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100
        bars = page.locator("#bisect-chart rect.bar")
        assert bars.count() == 4
        heights = [bars.nth(i).bounding_box()["height"] for i in range(bars.count())]
        assert max(heights) > 20

        page.locator("#patch-0001-sdpa-streaming").click()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert (tmp_path / "report.png").stat().st_size > 10_000
        assert page.evaluate("() => performance.getEntriesByType('resource').length") == 0
    finally:
        context.close()
    assert requests == [url], requests
