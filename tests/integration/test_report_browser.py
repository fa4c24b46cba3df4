"""Report pages of real runs, opened in a real headless Chromium (Debian's package, driven by
Playwright): the DOM shows the lanes, the fault at its time and the root cause; the page
draws something; and it makes no network request."""
from __future__ import annotations

import io
import os
import shutil

import pytest

from orchestrate.outcome.events import read_events
from tests.integration.conftest import unavailable

pytestmark = pytest.mark.integration


def chromium_path() -> str:
    found = os.environ.get("DDP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        unavailable("no chromium on PATH; scripts/run-tests.sh installs Debian's chromium package")
    return found


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is missing: pip install -e '.[dev]'")
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


def open_report(browser, run_dir):
    """The page, and every request it made (the page's own file:// load included)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    url = (run_dir / "report.html").resolve().as_uri()
    page.goto(url)
    page.wait_for_load_state("load")
    return page, url, requests


def assert_not_blank(page) -> None:
    from matplotlib import image

    pixels = image.imread(io.BytesIO(page.screenshot(full_page=True)), format="png")
    colours = {tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).round(2).tolist()}
    assert pixels.shape[0] > 900 and len(colours) > 20, (pixels.shape, len(colours))


def seconds_since_start(run_dir, kind: str) -> float:
    events = read_events(run_dir)
    return next(e["time"] for e in events if e["event"] == kind) - events[0]["time"]


@pytest.mark.xdist_group("paused-run")
def test_report_of_a_paused_node_shows_lanes_fault_and_root_cause(faulted_run, browser):
    run = faulted_run("pause")
    assert run.code == 1, run.output[-3000:]
    assert run.leftovers == []
    page, url, requests = open_report(browser, run.run_dir)
    try:
        assert page.locator("#lane-node0").count() == 1 and page.locator("#lane-node1").count() == 1
        assert page.locator("#lane-node2").count() == 0
        marker = page.locator("#marker-fault-0")
        assert float(marker.get_attribute("data-time")) == pytest.approx(
            seconds_since_start(run.run_dir, "fault"), abs=0.01)
        assert "pause:node1@step=30" in marker.locator("title").text_content()
        assert page.locator("#marker-detected-0 title").text_content().startswith("node1 detected at")
        root = page.locator("#root-cause").inner_text()
        assert "node1 stopped answering: its container is paused (hung)" in root
        assert_not_blank(page)
    finally:
        page.close()
    assert requests == [url], requests  # the page's own file, nothing else


@pytest.mark.xdist_group("elastic-run")
def test_report_of_an_elastic_recovery_shows_restart_and_resume(elastic_recovery, browser):
    result = elastic_recovery.run
    assert result.code == 0, result.output[-3000:]
    assert elastic_recovery.leftovers == []
    page, url, requests = open_report(browser, result.run_dir)
    try:
        assert page.locator("#lane-node0").count() == 1 and page.locator("#lane-node1").count() == 1
        assert float(page.locator("#marker-fault-0").get_attribute("data-time")) == pytest.approx(
            seconds_since_start(result.run_dir, "fault"), abs=0.01)
        assert "elastic restart" in page.locator("#marker-restart-0 title").text_content()
        resumed = page.locator("#marker-resumed-0 title").text_content()
        assert "steps lost" in resumed and "recovery" in resumed
        row = page.locator("#recoveries tbody tr").first.inner_text()
        assert row.startswith("node1") and "kill:node1@step=12" in row
        assert page.locator("#outcome").inner_text() == "SUCCEEDED"
        assert page.locator("#progress svg").count() == 1
        assert_not_blank(page)
    finally:
        page.close()
    assert requests == [url], requests
