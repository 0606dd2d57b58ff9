"""Golden tests of the pure builders: spec + node facts -> accelerate argv and environment."""

from __future__ import annotations

from pathlib import Path

from aviflow.runtime.__main__ import node_rank_from_env
from aviflow.runtime.launch import NodeInfo, accelerate_argv, node_env, rank_program
from aviflow.spec import TrainJob

RUN = Path("/runs/tiny-1234abcd")


def job(**spec):
    base = {"nodes": 2, "gpusPerNode": 4, "scriptFile": "train.py", "env": {"HF_HOME": "/hf"}}
    base.update(spec)
    return TrainJob.from_dict({"metadata": {"name": "tiny"}, "spec": base})


def node(rank=1, use_cpu=True, attempt=1):
    return NodeInfo(
        run_dir=RUN,
        node_rank=rank,
        num_nodes=2,
        procs_per_node=4,
        main_addr="tiny-0.tiny",
        main_port=29500,
        attempt=attempt,
        use_cpu=use_cpu,
    )


def test_rank_program_for_a_script():
    assert rank_program("/py", RUN, job(), "train.py") == [
        "/py",
        "-m",
        "aviflow.runtime.rank",
        "--run-dir",
        "/runs/tiny-1234abcd",
        "--script",
        "/runs/tiny-1234abcd/code/train.py",
    ]


def test_rank_program_for_a_command():
    j = job(scriptFile=None, command=["python", "-m", "pkg.train", "--lr", "3e-4"])
    assert rank_program("/py", RUN, j, None) == [
        "/py",
        "-m",
        "aviflow.runtime.rank",
        "--run-dir",
        "/runs/tiny-1234abcd",
        "--exec",
        "--",
        "python",
        "-m",
        "pkg.train",
        "--lr",
        "3e-4",
    ]


def test_accelerate_argv_multi_node():
    assert accelerate_argv("/py", node(), job(), ["PROG"], None) == [
        "/py",
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_machines",
        "2",
        "--machine_rank",
        "1",
        "--num_processes",
        "8",
        "--main_process_ip",
        "tiny-0.tiny",
        "--main_process_port",
        "29500",
        "--no_python",
        "PROG",
    ]


def test_accelerate_argv_with_config_file_lets_the_file_choose_the_distributed_type():
    j = job(accelerate={"configFile": "fsdp.yaml", "mixedPrecision": "bf16"})
    assert accelerate_argv("/py", node(), j, ["PROG"], Path("/c/fsdp.yaml")) == [
        "/py",
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "/c/fsdp.yaml",
        "--mixed_precision",
        "bf16",
        "--num_machines",
        "2",
        "--machine_rank",
        "1",
        "--num_processes",
        "8",
        "--main_process_ip",
        "tiny-0.tiny",
        "--main_process_port",
        "29500",
        "--no_python",
        "PROG",
    ]


def test_single_process_is_not_multi_gpu():
    one = NodeInfo(
        run_dir=RUN,
        node_rank=0,
        num_nodes=1,
        procs_per_node=1,
        main_addr="127.0.0.1",
        main_port=1,
        attempt=1,
        use_cpu=True,
    )
    assert "--multi_gpu" not in accelerate_argv(
        "/py", one, job(nodes=1, gpusPerNode=1), ["P"], None
    )


def test_node_env_on_cpu_and_gpu():
    base = {"PATH": "/bin", "AVIFLOW_RESUME_FROM": "stale"}
    env = node_env(base, node(attempt=2), job(), "/runs/x/checkpoints/step-000000010")
    assert env == {
        "PATH": "/bin",
        "HF_HOME": "/hf",
        "AVIFLOW_RUN_DIR": "/runs/tiny-1234abcd",
        "AVIFLOW_NODE_RANK": "1",
        "AVIFLOW_NUM_NODES": "2",
        "AVIFLOW_ATTEMPT": "2",
        "AVIFLOW_CHECKPOINT_DIR": "/runs/tiny-1234abcd/checkpoints",
        "AVIFLOW_KEEP_LAST": "3",
        "AVIFLOW_RESUME_FROM": "/runs/x/checkpoints/step-000000010",
        "PYTHONUNBUFFERED": "1",
        "ACCELERATE_USE_CPU": "true",
    }
    gpu = node_env(base, node(use_cpu=False), job(), None)
    assert "ACCELERATE_USE_CPU" not in gpu
    assert "AVIFLOW_RESUME_FROM" not in gpu


def test_node_rank_prefers_the_indexed_job_index():
    assert node_rank_from_env({"JOB_COMPLETION_INDEX": "3", "AVIFLOW_NODE_RANK": "1"}) == 3
    assert node_rank_from_env({"AVIFLOW_NODE_RANK": "1"}) == 1
