"""The Aviflow sidebar in JupyterLab, in Debian's Chromium (Playwright), on a real hub: alice
logs in with the form, her notebook server is spawned by the hub, and the sidebar (served by
the notebook's server extension through aviflow-api with her notebook's token) shows her jobs
as they change, her team's queue bar with the API's numbers, never bob's job; cancelling from
the job view frees the quota and her queued job starts; the launcher card opens the example.

Screenshots land in ``artifacts/sidebar/`` at the repository root (git-ignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aviflow_browser import CHROMIUM, CHROMIUM_ARGS

from aviflow import api
from aviflow.backends.hub import HubBackend
from aviflow.examples.notebook import EXAMPLE_NAME

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200)]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "sidebar"
SLEEP = "import time\ntime.sleep(900)\n"


def sleeper(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"gpusPerNode": gpus, "script": SLEEP},
    }


@pytest.fixture
def hub(hub_factory: Any, hub_config: Any) -> Iterator[Any]:
    cfg = hub_config()
    cfg["api"]["local"] = {"capacity": 8}  # team-a's quota (4 GPUs) is what makes jobs wait
    yield hub_factory(cfg)


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


def test_the_sidebar_follows_my_jobs_and_my_queue(hub: Any, stop_jobs: Any) -> None:
    from playwright.sync_api import expect, sync_playwright

    alice, bob = hub.token("alice"), hub.token("bob")

    def client(token: str) -> HubBackend:
        return HubBackend(hub.api.removesuffix("api/v1/"), token=token)

    holder = api.submit(sleeper("holder", 2), backend=client(alice)).id
    hub.until(
        lambda: hub.call("GET", f"jobs/{holder}/status", alice).json()["state"] == "RUNNING",
        "the first job running",
        timeout=120,
    )
    waiter = api.submit(sleeper("waiter", 4), backend=client(alice)).id
    theirs = api.submit(sleeper("bobs-job", 1), backend=client(bob)).id
    queue = hub.until(
        lambda: next(
            (
                q
                for q in hub.call("GET", "queues", alice).json()["queues"]
                if q["queue"] == "queue-a" and q["pendingCount"] == 1 and q["gpusInUse"] == 2
            ),
            None,
        ),
        "the waiting job in queue-a",
    )
    waiting = hub.call("GET", f"jobs/{waiter}", alice).json()
    assert (waiting["state"], waiting["queuePosition"]) == ("QUEUED", 1)
    hub.spawn("alice", alice)
    home = requests.get(
        f"{hub.url}/user/alice/api/contents/{EXAMPLE_NAME}",
        headers={"Authorization": f"token {alice}"},
        timeout=60,
    )
    assert home.status_code == 200 and home.json()["type"] == "notebook"  # a first login's example

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(f"{hub.url}/hub/login")
            page.fill("#username_input", "alice")
            page.fill("#password_input", "aviflow-test-pw")
            page.click("#login_submit")
            page.goto(f"{hub.url}/user/alice/lab")
            tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='aviflow-sidebar']")
            expect(tab).to_have_count(1, timeout=180_000)
            tab.click()
            sidebar = page.locator("#aviflow-sidebar")
            expect(sidebar).to_be_visible()

            rows = sidebar.locator("li.aviflow-job")
            row = {
                j: sidebar.locator(f"li.aviflow-job[data-job-id='{j}']") for j in (holder, waiter)
            }
            expect(rows).to_have_count(2, timeout=60_000)  # mine only, newest first
            assert [r.get_attribute("data-job-id") for r in rows.all()] == [waiter, holder]
            expect(row[holder]).to_have_attribute("data-state", "RUNNING")
            expect(row[waiter]).to_have_attribute("data-state", "QUEUED")
            expect(row[waiter].locator(".aviflow-job-position")).to_have_text("#1 in queue")
            expect(row[waiter].locator(".aviflow-job-reason")).to_have_text(waiting["message"])
            expect(row[waiter].locator(".aviflow-job-size")).to_have_text("1 \u00d7 4 GPUs")
            expect(row[holder].locator(".aviflow-job-size")).to_have_text("1 \u00d7 2 GPUs")
            assert theirs not in page.content()

            bar = sidebar.locator(".aviflow-queue[data-queue='queue-a']")
            expect(bar).to_have_count(1)
            expect(bar).to_have_attribute("data-in-use", str(queue["gpusInUse"]))
            expect(bar).to_have_attribute("data-pending", str(queue["pendingCount"]))
            expect(bar).to_have_attribute("data-quota", str(queue["gpuQuota"]))
            expect(bar).to_have_attribute("data-borrowed", str(queue["borrowed"]))
            expect(bar.locator(".aviflow-queue-label")).to_have_text("2 / 4 GPUs · 1 pending")
            expect(sidebar.locator(".aviflow-queue")).to_have_count(1)  # team-a's queue only
            status = page.locator("#aviflow-status .aviflow-status-text")
            expect(status).to_have_text("1 running · 1 queued")
            shot(page, "lab-sidebar")

            # the job view, and cancel with confirmation
            row[holder].click()
            view = page.locator(f"#aviflow-job-{holder}")
            expect(view).to_be_visible(timeout=60_000)
            header = view.locator(".aviflow-jobview-section[data-section='header']")
            expect(header.locator(".aviflow-badge[data-state='RUNNING']")).to_have_count(1)
            expect(header).to_contain_text("holder")
            expect(view.locator("select.aviflow-log-rank option")).to_have_count(2, timeout=60_000)
            shot(page, "lab-job-view")
            view.locator("button.aviflow-cancel").click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_contain_text("Cancel job holder?")
            dialog.get_by_role("button", name="Cancel job", exact=True).click()
            expect(row[holder]).to_have_attribute("data-state", "CANCELLED", timeout=60_000)
            assert hub.call("GET", f"jobs/{holder}/status", alice).json()["state"] == "CANCELLED"
            expect(view.locator("button.aviflow-cancel")).to_be_hidden(timeout=30_000)
            # the freed quota admits the waiting job: its row changes on its own
            expect(row[waiter]).to_have_attribute("data-state", "RUNNING", timeout=120_000)
            expect(row[waiter].locator(".aviflow-job-position")).to_have_count(0)
            expect(status).to_have_text("1 running", timeout=30_000)
            expect(bar).to_have_attribute("data-in-use", "4", timeout=30_000)
            expect(bar).to_have_attribute("data-pending", "0")
            assert theirs not in page.content()
            shot(page, "lab-after-cancel")

            # the launcher card creates a notebook with the template cell
            page.keyboard.press("Control+Shift+L")  # a new launcher
            # (the launcher the session opened with may still be there, in a hidden tab)
            card = page.locator(".jp-LauncherCard", has_text="New training job").filter(
                visible=True
            )
            expect(card.first).to_be_visible(timeout=60_000)
            card.first.click()
            cells = page.locator(".jp-NotebookPanel:visible .jp-Cell")
            expect(cells).to_have_count(3, timeout=60_000)
            expect(cells.nth(0)).to_contain_text("Train on the GPU pool from this notebook")
            expect(cells.nth(2)).to_contain_text("%%aviflow_train --nodes 2 --gpus-per-node 2")
            shot(page, "lab-new-training-job")
        finally:
            browser.close()
    stray = stop_jobs(hub.run_root)
    assert not stray, stray
