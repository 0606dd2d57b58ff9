"""The sidebar in Debian's Chromium (Playwright) without a hub: in Notebook 7 (its left panel,
opened from the command palette) with the local backend, and in JupyterLab when aviflow-api
cannot be reached (a clear message, retried). The hub's path (JupyterLab spawned by a real hub,
jobs changing state, queue bars, cancel, the launcher card) is tests/hub/test_sidebar_browser.py.

Screenshots land in ``artifacts/sidebar/`` at the repository root (git-ignored).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import pytest
from aviflow_browser import CHROMIUM, CHROMIUM_ARGS

from aviflow._ports import free_port
from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV
from aviflow.examples.notebook import EXAMPLE_NAME
from aviflow.records import FailureInfo, JobState

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "sidebar"


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    print(f"screenshot: {ARTIFACTS / name}.png")


def open_from_palette(page: Any, command: str, shows: Any) -> None:
    """Run ``command`` from the command palette (Ctrl+Shift+C) until ``shows`` is visible; a
    dialog of the starting kernel may take the first key press."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    palette = page.locator(".lm-CommandPalette-input")
    for attempt in range(4):
        for dialog in page.locator(".jp-Dialog").all():  # e.g. "Select Kernel"
            dialog.get_by_role("button").last.click()
        page.keyboard.press("Control+Shift+C")
        try:
            palette.wait_for(state="visible", timeout=10_000)
            palette.fill(command)
            page.keyboard.press("Enter")
            shows.wait_for(state="visible", timeout=10_000)
            return
        except PlaywrightTimeout:
            if attempt == 3:
                raise
            page.keyboard.press("Escape")


def test_notebook7_shows_my_jobs_and_the_first_failing_rank(
    jupyter_server: Any, make_job: Any
) -> None:
    from playwright.sync_api import expect, sync_playwright

    me = getpass.getuser()
    running = make_job(JobState.RUNNING, name="runs", user=me, metrics=12)
    failure = FailureInfo(rank=3, node=1, attempt=1, exception="ValueError", message="bad batch")
    failed = make_job(JobState.FAILED, name="breaks", user=me, failure=failure)
    theirs = make_job(JobState.RUNNING, name="theirs", user="mallory")
    server = jupyter_server(app="notebook")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 950})
        try:
            page.goto(f"{server.url}notebooks/{EXAMPLE_NAME}?token={server.token}")
            expect(page.locator(".jp-Cell")).to_have_count(3, timeout=120_000)
            expect(page.locator("#aviflow-sidebar")).to_have_count(1)
            sidebar = page.locator("#aviflow-sidebar")
            open_from_palette(page, "Show Aviflow jobs", sidebar)
            rows = sidebar.locator("li.aviflow-job")
            expect(rows).to_have_count(2, timeout=60_000)
            assert [r.get_attribute("data-job-id") for r in rows.all()] == [failed.id, running.id]
            row = sidebar.locator(f"li.aviflow-job[data-job-id='{failed.id}']")
            expect(row).to_have_attribute("data-state", "FAILED")
            expect(row.locator(".aviflow-job-failure")).to_have_text(
                "rank 3 failed: ValueError: bad batch"
            )
            assert theirs.id not in page.content()
            expect(sidebar.locator("p.aviflow-queues-empty")).to_have_text("No team queues.")
            shot(page, "notebook7-sidebar")
            sidebar.locator(f"li.aviflow-job[data-job-id='{running.id}']").click()
            view = page.locator(f"#aviflow-job-{running.id}")
            expect(view).to_be_visible(timeout=60_000)
            chart = view.locator("svg.aviflow-chart[data-metric='loss']")
            expect(chart).to_have_attribute("data-points", "12", timeout=30_000)
            expect(view.locator("pre.aviflow-log-text")).to_contain_text("rank 0 line 2")
            shot(page, "notebook7-job-view")
        finally:
            browser.close()


def test_jupyterlab_says_when_aviflow_api_cannot_be_reached(jupyter_server: Any) -> None:
    from playwright.sync_api import expect, sync_playwright

    api = f"http://127.0.0.1:{free_port()}/services/aviflow-api/api/v1/"
    server = jupyter_server(
        "hubbed", app="jupyterlab", **{API_URL_ENV: api, TOKEN_ENV: "not-a-token"}
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{server.url}lab?token={server.token}")
            tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='aviflow-sidebar']")
            expect(tab).to_have_count(1, timeout=120_000)
            tab.click()
            error = page.locator("#aviflow-sidebar .aviflow-error")
            expect(error).to_be_visible(timeout=60_000)
            expect(error).to_have_attribute("data-error", "BackendUnavailable")
            expect(error.locator(".aviflow-error-message")).to_contain_text(
                f"cannot reach aviflow-api at {api}"
            )
            expect(error.locator(".aviflow-error-retry")).to_have_text("retrying…")
            expect(page.locator("#aviflow-status .aviflow-status-text")).to_have_text(
                "Aviflow unavailable"
            )
            shot(page, "lab-unreachable")
        finally:
            browser.close()
