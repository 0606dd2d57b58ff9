"""A real notebook in a real kernel (nbclient + ipykernel): ``%%aviflow_train`` runs a
2-node x 2-process training on the local backend, a second cell resumes it with
``--resume auto``, and a fresh kernel re-attaches a panel replayed from the run store.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from aviflow.backends.local import LocalBackend
from aviflow.records import JobState

REPORT = """\
import json
print("REPORT " + json.dumps({{"id": {var}.id, "state": {var}.status.value,
    "steps": sorted({{r["step"] for r in {var}.metric_rows()}}),
    "checkpoints": [c.step for c in {var}.checkpoints()]}}))
"""

# --max-restarts: a rank that crashes (gloo under load) restarts the group from its checkpoint.
MAGIC = "%%aviflow_train --nodes 2 --gpus-per-node 2 --name nb-e2e --vars cfg --time-limit 20m --max-restarts 2"


def _run(nb: nbformat.NotebookNode, cwd: Path, env: dict[str, str]) -> nbformat.NotebookNode:
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute(env=env)
    return nb


def _stream(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _report(cell: Any) -> dict[str, Any]:
    line = next(x for x in _stream(cell).splitlines() if x.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


def _kernel_env(run_root: Path, notebook: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AVIFLOW_ROOT=str(run_root), JPY_SESSION_NAME=str(notebook), AVIFLOW_LOCAL_CAPACITY="8"
    )
    env.pop("AVIFLOW_BACKEND", None)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


@pytest.mark.training
def test_magic_trains_resumes_and_reattaches_in_a_real_kernel(
    tmp_path: Path, run_root: Path, leftover_processes, train_cell: str
) -> None:
    notebook = tmp_path / "train-nb.ipynb"
    cells = [
        nbformat.v4.new_code_cell("%load_ext aviflow"),
        nbformat.v4.new_code_cell('cfg = {"steps": 6, "every": 3, "lr": 0.05}'),
        nbformat.v4.new_code_cell(f"{MAGIC} --out first --wait\n{train_cell}"),
        nbformat.v4.new_code_cell(REPORT.format(var="first")),
        nbformat.v4.new_code_cell('cfg = {"steps": 9, "every": 3, "lr": 0.05}'),
        nbformat.v4.new_code_cell(f"{MAGIC} --resume auto --out second --wait\n{train_cell}"),
        nbformat.v4.new_code_cell(REPORT.format(var="second")),
        nbformat.v4.new_code_cell("%aviflow_jobs"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(nb, notebook)
    _run(nb, tmp_path, _kernel_env(run_root, notebook))

    first, second = _report(nb.cells[3]), _report(nb.cells[6])
    assert f"job {first['id']} SUCCEEDED" in _stream(nb.cells[2])
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for o in nb.cells[2].outputs
        if o.output_type == "display_data"
    )
    assert first == {
        "id": first["id"],
        "state": "SUCCEEDED",
        "steps": [1, 2, 3, 4, 5, 6],
        "checkpoints": [3, 6],
    }
    assert second == {
        "id": second["id"],
        "state": "SUCCEEDED",
        "steps": [7, 8, 9],
        "checkpoints": [9],
    }

    backend = LocalBackend(root=run_root)
    assert backend.list_ids() == [first["id"], second["id"]]
    for job_id in (first["id"], second["id"]):
        run = backend.run_dir(job_id)
        assert (run.code_dir / "train.py").read_text() == train_cell
        meta = run.meta()
        assert meta.origin["notebook"] == str(notebook)
        assert meta.origin["kind"] == "notebook-cell"
        assert meta.origin["cell_hash"].startswith("sha256:")
        assert meta.code_hash.startswith("sha256:")
        assert run.spec().spec.nodes == 2 and run.spec().spec.gpus_per_node == 2
        assert all(m.values["loss"] > 0 for m in run.metrics().items)
        assert leftover_processes(job_id) == []
    start = backend.spec(second["id"]).spec.resume_from
    assert (start.job, start.step) == (first["id"], 6)
    assert "starting at step 7" in backend.log(second["id"], 0).text
    table = nb.cells[7].outputs[0]["data"]["text/html"]
    assert table.count("class='aviflow-job-row'") == 2

    # A new kernel (as after a restart) re-attaches and replays the metrics.
    attach = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext aviflow"),
            nbformat.v4.new_code_cell(f"job = %aviflow_attach {first['id']}\njob"),
            nbformat.v4.new_code_cell(
                "import json, re\npanel = job.panel(); panel.poller.join(120)\n"
                "print('REPORT ' + json.dumps({'state': panel.last.state.value,"
                " 'points': re.findall(r\"data-points='(\\d+)'\", panel.chart.value),"
                " 'checkpoints': [c.step for c in panel.last.checkpoints]}))"
            ),
        ]
    )
    _run(attach, tmp_path, _kernel_env(run_root, tmp_path / "other.ipynb"))
    assert _report(attach.cells[2]) == {
        "state": "SUCCEEDED",
        "points": ["6"],
        "checkpoints": [3, 6],
    }
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for o in attach.cells[1].outputs
    )
    assert backend.status(first["id"]).state is JobState.SUCCEEDED
