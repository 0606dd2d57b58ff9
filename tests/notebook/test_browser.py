"""JupyterLab 4 and Notebook 7 in Debian's Chromium (Playwright): run the magic cell and
watch the panel reach SUCCEEDED with a rendered chart.

The server listens on loopback on a free port with token auth and its own temp dirs; the
job runs on the local backend. The screenshot lands in ``artifacts/notebook/`` at the
repository root (git-ignored); its path is printed.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from aviflow_browser import CHROMIUM, CHROMIUM_ARGS
from aviflow_jupyter_server import start_jupyter

from aviflow.backends import BACKEND_ENV
from aviflow.backends.local import CAPACITY_ENV
from aviflow.store import ROOT_ENV

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "notebook"


# front end -> (module to run, notebook URL path, extra flags)
FRONTENDS = {
    "jupyterlab": (
        "jupyterlab",
        "lab/tree/panel.ipynb",
        [
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
    ),
    "notebook7": ("notebook", "notebooks/panel.ipynb", []),
}


@pytest.fixture(params=sorted(FRONTENDS))
def jupyter_server(
    request: pytest.FixtureRequest, tmp_path: Path, run_root: Path
) -> Iterator[tuple[str, str, Path]]:
    """A JupyterLab or Notebook 7 server on loopback: yields (front end, notebook URL with token,
    notebook directory)."""
    frontend = request.param
    module, url_path, extra = FRONTENDS[frontend]
    env = {k: v for k, v in os.environ.items() if k != BACKEND_ENV}
    env.update(
        {ROOT_ENV: str(run_root), CAPACITY_ENV: "8"},
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    token = secrets.token_hex(16)
    server = start_jupyter(tmp_path / "lab", module, env=env, token=token, argv=extra)
    try:
        yield frontend, f"{server.url}{url_path}?token={token}", server.root_dir
    finally:
        server.stop()


@pytest.mark.browser
@pytest.mark.training
def test_panel_reaches_succeeded_with_a_chart(
    jupyter_server, train_cell: str, run_root: Path, leftover_processes
) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    frontend, url, root = jupyter_server
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "%load_ext aviflow\ncfg = {'steps': 8, 'every': 4, 'lr': 0.05}"
            ),
            nbformat.v4.new_code_cell(
                "%%aviflow_train --nodes 2 --gpus-per-node 2 --name browser-run --vars cfg --max-restarts 2 --out job\n"
                + train_cell
            ),
            nbformat.v4.new_code_cell("6 * 7"),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, root / "panel.ipynb")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        try:
            page.goto(url)
            expect(page.locator(".jp-Cell").first).to_be_visible(timeout=180_000)
            if frontend == "jupyterlab":
                expect(
                    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
                ).to_have_count(1, timeout=180_000)
            # Run > Run All Cells: the magic returns at once and the job runs on in the background.
            # The command acts on the focused notebook; retry until the first cell has started.
            first_prompt = page.locator(".jp-Cell").first.locator(".jp-InputPrompt")
            for attempt in range(5):
                try:
                    _accept_kernel_choice(page)
                    page.locator(".jp-Cell").first.locator(".jp-InputPrompt").click(timeout=20_000)
                    page.get_by_role("menuitem", name="Run", exact=True).click(timeout=20_000)
                    page.get_by_role("menuitem", name="Run All Cells", exact=True).click(
                        timeout=20_000
                    )
                    expect(first_prompt).not_to_have_text("[ ]:", timeout=20_000)
                    break
                except (AssertionError, PlaywrightTimeout):  # e.g. a dialog took the click
                    if attempt == 4:
                        raise
            # the cell after the magic ran while the job was still going
            expect(
                page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output")
            ).to_contain_text("42", timeout=180_000)
            panel = page.locator(".aviflow-panel")
            expect(panel).to_have_count(1, timeout=180_000)
            finished = ", ".join(
                f".aviflow-badge[data-state='{s}']" for s in ("SUCCEEDED", "FAILED", "CANCELLED")
            )
            expect(panel.locator(finished)).to_have_count(1, timeout=400_000)
            state = panel.locator(".aviflow-badge").get_attribute("data-state")
            assert state == "SUCCEEDED", panel.inner_text()
            chart = panel.locator("svg.aviflow-chart[data-metric='loss']")
            expect(chart).to_have_attribute("data-points", "8", timeout=30_000)
            assert chart.locator("polyline").count() == 1
            box = chart.bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 100
            expect(panel.locator(".aviflow-rank-state[data-state='SUCCEEDED']")).to_have_count(4)
            expect(panel.locator(".aviflow-checkpoint")).to_have_count(2)
            job_id = panel.locator(".aviflow-id").inner_text()
            panel.scroll_into_view_if_needed()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / f"{frontend}-panel-{job_id}.png"
            panel.screenshot(path=str(shot))
            page.screenshot(path=str(ARTIFACTS / f"{frontend}-page-{job_id}.png"), full_page=True)
            print(f"screenshot: {shot}")
        except BaseException:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            failed = ARTIFACTS / f"{frontend}-failure-{secrets.token_hex(4)}.png"
            page.screenshot(path=str(failed), full_page=True)
            print(f"failure screenshot: {failed}")
            raise
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    assert leftover_processes(job_id) == []


def _accept_kernel_choice(page) -> None:
    """JupyterLab sometimes asks which kernel to start even though the notebook names one;
    answer as a user would, with the preselected Python 3 kernel."""
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    if dialog.count():
        # Its accept button reads "Select" but is named "Select Kernel" (its aria-label).
        dialog.locator("button.jp-mod-accept").click(timeout=10_000)
        dialog.wait_for(state="detached", timeout=30_000)
