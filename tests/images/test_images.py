"""The hub, notebook and trainer images (issue 10): built by ``images/build.sh`` from one lock
without a Docker engine, then unpacked with umoci and run, as each image's user, the way a
container runtime would (``aviflow_testcluster._oci``)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from aviflow_images import ROOT

from aviflow_testcluster import _oci, free_port

from .conftest import RunIn

pytestmark = [pytest.mark.images, pytest.mark.timeout(3600)]

PYTHON = "/opt/aviflow/bin/python"
HUB_CONFIG = "/opt/aviflow/lib/python3.11/site-packages/aviflow_hub/jupyterhub_config.py"


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            pins[normalize(m.group(1))] = m.group(2)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """``2.15.0+cu132`` -> ``2.15.0``: PyPI's torch carries its CUDA as a local label, which
    the lock's ``torch==2.15.0`` matches."""
    return version.split("+", 1)[0]


def installed(run_in: RunIn, image: str) -> dict[str, str]:
    proc = run_in(
        image, [PYTHON, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]
    )
    assert proc.returncode == 0, proc.stderr
    return {normalize(p["name"]): public(p["version"]) for p in json.loads(proc.stdout)}


def oci_config(row: dict[str, Any]) -> dict[str, Any]:
    layout = Path(row["layout"])
    blob = lambda d: layout / "blobs" / d.replace(":", "/")  # noqa: E731
    manifest = json.loads(blob(row["digest"]).read_text())
    return json.loads(blob(manifest["config"]["digest"]).read_text())


def test_every_image_is_tagged_labelled_and_runs_as_a_user(
    built_images: dict[str, dict[str, Any]], bundles: dict[str, _oci.Bundle]
) -> None:
    lock_hash = hashlib.sha256((ROOT / "requirements.lock").read_bytes()).hexdigest()
    for name, row in built_images.items():
        assert row["tag"] == f"0.1.0-{lock_hash[:12]}"
        config = oci_config(row)
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.title"] == f"aviflow-{name}"
        assert labels["org.opencontainers.image.version"] == "0.1.0"
        assert labels["dev.aviflow.lock-hash"] == lock_hash[:12]
        assert config["config"]["User"] == "1000:1000"
        assert config["created"].startswith("1970-01-01")  # --timestamp 0
        process = bundles[name].process()
        assert (process.uid, process.gid) == (1000, 1000)


def test_hub_image_runs_jupyterhub_and_loads_the_hub_config(run_in: RunIn, tmp_path: Path) -> None:
    pins = lock_pins()
    proc = run_in("hub", ["jupyterhub", "--version"])
    assert (proc.returncode, proc.stdout.strip()) == (0, pins["jupyterhub"]), proc.stderr
    proc = run_in("hub", ["configurable-http-proxy", "--version"])
    assert (proc.returncode, proc.stdout.strip()) == (0, "4.6.3"), proc.stderr
    proc = run_in(
        "hub", [PYTHON, "-c", "import kubespawner, jupyterhub_idle_culler, aviflow_hub.service"]
    )
    assert proc.returncode == 0, proc.stderr
    # the hub config (as the chart will mount it) loads: JupyterHub initializes from it
    etc = tmp_path / "etc"
    etc.mkdir()
    etc.chmod(0o777)
    cfg = yaml.safe_load((ROOT / "hub" / "local.yaml").read_text())
    cfg["hub"]["dataDir"] = "/tmp/hub-state"
    cfg["hub"]["port"] = free_port()
    (etc / "hub.yaml").write_text(yaml.safe_dump(cfg))
    proc = run_in(
        "hub",
        ["jupyterhub", "-f", HUB_CONFIG, "--show-config"],
        env={"AVIFLOW_HUB_CONFIG": "/etc/aviflow/hub.yaml"},
        binds=[(etc, "/etc/aviflow", True)],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Loaded config files:\n  {HUB_CONFIG}" in proc.stdout
    assert "Defining custom scope custom:aviflow:submit" in proc.stderr
    assert "Creating service aviflow-api" in proc.stderr


KERNEL = textwrap.dedent("""
    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3")
    out = []
    try:
        reply = kc.execute_interactive(
            "%load_ext aviflow\\n"
            "ip = get_ipython()\\n"
            "print(sorted(m for m in ip.magics_manager.magics['cell'] if m.startswith('aviflow')))",
            timeout=120,
            output_hook=lambda m: out.append(m["content"].get("text", "")),
        )
        print(reply["content"]["status"], "".join(out).strip())
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
""")


def test_notebook_image_serves_jupyterlab_and_loads_aviflow_in_a_real_kernel(
    run_in: RunIn,
) -> None:
    proc = run_in("notebook", ["jupyterhub-singleuser", "--help-all"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "JupyterHubSingleUser(ExtensionApp) options" in proc.stdout
    proc = run_in("notebook", ["jupyterhub-singleuser", "--version"])
    assert proc.stdout.strip() == lock_pins()["jupyterhub"]
    proc = run_in("notebook", [PYTHON, "-c", KERNEL], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok ['aviflow_train']"
    proc = run_in("notebook", ["jupyter", "labextension", "list"])
    assert proc.returncode == 0
    # the panel's widgets and the Aviflow sidebar, served prebuilt
    listed = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert re.search(r"@jupyter-widgets/jupyterlab-manager v\S+ enabled OK", listed), listed
    assert re.search(r"aviflow-jupyterlab v0\.1\.0 enabled OK", listed), listed
    # and the sidebar's server extension, enabled by the file the wheel installs
    proc = run_in("notebook", ["jupyter", "server", "extension", "list"])
    listed = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert "aviflow_jupyter enabled" in listed, listed
    assert re.search(r"aviflow_jupyter\s+OK", listed), listed


TRAIN = textwrap.dedent("""
    import os
    import torch
    from accelerate import Accelerator
    acc = Accelerator()
    total = acc.reduce(torch.tensor([float(acc.process_index + 1)]), reduction="sum")
    line = f"rank {acc.process_index}/{acc.num_processes} {acc.distributed_type.value} sum {total.item()}"
    os.write(1, (line + "\\n").encode())  # one write: the two ranks share the pipe
    acc.wait_for_everyone()
    torch.distributed.destroy_process_group()  # not left to gloo's threads at exit
""")


def test_trainer_image_imports_and_runs_a_two_process_accelerate_job(
    run_in: RunIn, tmp_path: Path
) -> None:
    pins = lock_pins()
    proc = run_in(
        "trainer",
        [
            PYTHON,
            "-c",
            "import torch, accelerate, aviflow; print(torch.__version__, accelerate.__version__)",
        ],
    )
    assert proc.returncode == 0, proc.stderr
    assert [public(v) for v in proc.stdout.split()] == [pins["torch"], pins["accelerate"]]
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    argv = [
        PYTHON, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
        "--num_processes", "2", "--main_process_ip", "127.0.0.1",
        "--main_process_port", str(free_port()), "--mixed_precision", "no",
        "--dynamo_backend", "no", "/code/train.py",
    ]  # fmt: skip
    proc = run_in(
        "trainer", argv, env={"ACCELERATE_USE_CPU": "true"}, binds=[(code, "/code", True)]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert lines == ["rank 0/2 MULTI_CPU sum 3.0", "rank 1/2 MULTI_CPU sum 3.0"]


def test_notebook_and_trainer_have_the_same_version_of_every_shared_package(
    run_in: RunIn,
) -> None:
    notebook, trainer = installed(run_in, "notebook"), installed(run_in, "trainer")
    shared = set(notebook) & set(trainer)
    assert {"torch", "accelerate", "aviflow", "numpy"} <= shared
    assert {p: (notebook[p], trainer[p]) for p in shared if notebook[p] != trainer[p]} == {}
    pins = lock_pins()
    off_lock = {p: v for p, v in notebook.items() if p in pins and pins[p] != v}
    assert off_lock == {}
    assert not set(notebook) - set(pins) - {"aviflow", "pip", "setuptools"}


def local_certificates() -> list[str]:
    """First base64 line of each CA added to this machine (Debian keeps them in
    /usr/local/share/ca-certificates): here, the egress CA the package index is signed with,
    which a build that reached the index would have needed."""
    found: set[str] = set()
    for crt in Path("/usr/local/share/ca-certificates").rglob("*.crt"):
        text = crt.read_text(errors="replace")
        found |= set(re.findall(r"-----BEGIN CERTIFICATE-----\s*\n(\S{64})", text))
    return sorted(found)


@pytest.mark.parametrize("image", ["hub", "notebook"])
def test_no_certificate_or_secret_of_the_build_is_left_in_an_image(
    bundles: dict[str, _oci.Bundle], image: str
) -> None:
    # every layer, not only what the top one shows: a file a later layer removes is still in
    # the image's blobs
    layers = [str(p) for p in bundles[image].layers]
    for layer in bundles[image].layers:
        for secret_dir in (layer / "run" / "secrets", layer / "wheels"):
            assert not secret_dir.is_dir() or not any(secret_dir.iterdir()), secret_dir
    for needle in local_certificates():
        found = subprocess.run(
            ["grep", "-rlF", "--exclude-dir=proc", needle, *layers],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert found.stdout == "", f"the build's CA is in {found.stdout.splitlines()[:5]}"
