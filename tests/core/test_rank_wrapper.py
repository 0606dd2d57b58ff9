"""The rank wrapper's exit, without torch: status, failure records, what a normal exit runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aviflow.runtime.env import RuntimeEnv


def run_rank(tmp_path: Path, source: str) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    (run_dir / "failures").mkdir(parents=True)
    script = tmp_path / "script.py"
    script.write_text(source)
    env = {**os.environ, "RANK": "0", **RuntimeEnv(run_dir=run_dir).to_env()}
    proc = subprocess.run(
        [sys.executable, "-m", "aviflow.runtime.rank", "--script", str(script)],
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    return proc.returncode, run_dir


def failures(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "failures").iterdir())]


def test_a_finished_script_exits_0_after_what_a_normal_exit_runs(tmp_path):
    code, run_dir = run_rank(
        tmp_path,
        "import atexit, sys, threading, time\n"
        "atexit.register(lambda: open('atexit.txt', 'w').write('ran'))\n"
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    open('thread.txt', 'w').write('joined')\n"
        "threading.Thread(target=late).start()\n"
        "print('torch' in sys.modules, 'torch.distributed' in sys.modules)\n"
        "import ctypes\n"
        "ctypes.CDLL(None).printf(b'from C\\n')\n",
    )
    assert code == 0
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "joined"
    log = (run_dir / "logs" / "rank-0.log").read_text()
    assert "False False\n" in log  # the wrapper itself never imports torch
    assert "from C\n" in log  # C stdio buffers are flushed before os._exit
    assert failures(run_dir) == []


@pytest.mark.parametrize(
    ("source", "status", "exception"),
    [
        ("raise ValueError('boom')\n", 1, "ValueError"),
        ("import sys\nsys.exit(3)\n", 3, "SystemExit"),
        ("import sys\nsys.exit('bye')\n", 1, "SystemExit"),
    ],
)
def test_a_failing_script_still_exits_non_zero_with_its_record(tmp_path, source, status, exception):
    code, run_dir = run_rank(tmp_path, source)
    assert code == status
    [record] = failures(run_dir)
    assert record["exception"] == exception
    assert record["rank"] == 0


def test_sys_exit_0_is_a_success(tmp_path):
    code, run_dir = run_rank(tmp_path, "import sys\nsys.exit(0)\n")
    assert code == 0
    assert failures(run_dir) == []


def test_a_rank_killed_by_a_signal_is_reported_as_such(tmp_path):
    code, _ = run_rank(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert code == -9
