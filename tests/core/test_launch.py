"""Golden tests of the pure builders: spec + RuntimeEnv -> accelerate argv and environment,
and of the RuntimeEnv contract itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from aviflow.runtime.env import RuntimeEnv, RuntimeEnvError, process_rank
from aviflow.runtime.launch import accelerate_argv, has_gpus, node_env, rank_program
from aviflow.spec import TrainJob
from aviflow.store import RunDir

RUN = Path("/runs/ada/tiny-1234abcd")


def job(**spec):
    base = {"nodes": 2, "gpusPerNode": 4, "scriptFile": "train.py", "env": {"HF_HOME": "/hf"}}
    base.update(spec)
    return TrainJob.from_dict({"metadata": {"name": "tiny"}, "spec": base})


def node(rank=1, attempt=1, **kw):
    return RuntimeEnv(
        run_dir=RUN, node_rank=rank, num_nodes=2, main_addr="tiny-0.tiny", attempt=attempt, **kw
    )


def test_rank_program_for_a_script():
    assert rank_program("/py", RunDir(RUN), job(), "train.py") == [
        "/py",
        "-m",
        "aviflow.runtime.rank",
        "--script",
        "/runs/ada/tiny-1234abcd/code/train.py",
    ]


def test_rank_program_for_a_command():
    j = job(scriptFile=None, command=["python", "-m", "pkg.train", "--lr", "3e-4"])
    assert rank_program("/py", RunDir(RUN), j, None) == [
        "/py",
        "-m",
        "aviflow.runtime.rank",
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


TAIL = [
    "--num_machines", "2", "--machine_rank", "1", "--num_processes", "8",
    "--main_process_ip", "tiny-0.tiny", "--main_process_port", "29500", "--no_python", "PROG",
]  # fmt: skip
HEAD = ["/py", "-m", "accelerate.commands.launch"]
FSDP2 = ["--use_fsdp", "--fsdp_version", "2"]
WRAP = ["--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"]
SHARDED = ["--fsdp_state_dict_type", "SHARDED_STATE_DICT"]
NO_DYNAMO = ["--dynamo_backend", "no"]


@pytest.mark.parametrize(
    ("accelerate", "golden"),
    [
        pytest.param(
            {"strategy": "ddp"},
            ["--multi_gpu", "--mixed_precision", "no", *NO_DYNAMO],
            id="ddp",
        ),
        pytest.param(
            {"strategy": "fsdp", "mixedPrecision": "bf16"},
            [
                *FSDP2,
                "--fsdp_reshard_after_forward", "true",
                "--fsdp_offload_params", "false",
                "--fsdp_activation_checkpointing", "false",
                *WRAP, *SHARDED,
                "--mixed_precision", "bf16", *NO_DYNAMO,
            ],
            id="fsdp-defaults",
        ),
        pytest.param(
            {"strategy": "fsdp", "fsdp": {"sharding": "grad-op"}},
            [
                *FSDP2,
                "--fsdp_reshard_after_forward", "false",
                "--fsdp_offload_params", "false",
                "--fsdp_activation_checkpointing", "false",
                *WRAP, *SHARDED,
                "--mixed_precision", "no", *NO_DYNAMO,
            ],
            id="fsdp-grad-op",
        ),
        pytest.param(
            {
                "strategy": "fsdp",
                "fsdp": {"sharding": "full", "offload": True, "activationCheckpointing": True},
            },
            [
                *FSDP2,
                "--fsdp_reshard_after_forward", "true",
                "--fsdp_offload_params", "true",
                "--fsdp_activation_checkpointing", "true",
                *WRAP, *SHARDED,
                "--mixed_precision", "no", *NO_DYNAMO,
            ],
            id="fsdp-offload-activation-checkpointing",
        ),
    ],
)  # fmt: skip
def test_each_strategy_preset_renders_its_golden_arguments(accelerate, golden):
    j = job(accelerate=accelerate)
    assert accelerate_argv("/py", node(), j, ["PROG"], None) == [*HEAD, *golden, *TAIL]


def test_no_strategy_is_ddp_and_a_config_file_keeps_its_own():
    plain = accelerate_argv("/py", node(), job(), ["PROG"], None)
    assert plain == accelerate_argv(
        "/py", node(), job(accelerate={"strategy": "ddp"}), ["PROG"], None
    )
    own = job(accelerate={"configFile": "fsdp.yaml"})
    argv = accelerate_argv("/py", node(), own, ["PROG"], Path("/c/fsdp.yaml"))
    assert argv == [*HEAD, "--config_file", "/c/fsdp.yaml", *TAIL]


def test_fsdp_on_one_process_is_still_fsdp():
    one = RuntimeEnv(run_dir=RUN)
    argv = accelerate_argv(
        "/py", one, job(nodes=1, gpusPerNode=1, accelerate={"strategy": "fsdp"}), ["P"], None
    )
    assert argv[3:6] == ["--use_fsdp", "--fsdp_version", "2"] and "--multi_gpu" not in argv


def test_single_process_is_not_multi_gpu():
    one = RuntimeEnv(run_dir=RUN)
    assert "--multi_gpu" not in accelerate_argv(
        "/py", one, job(nodes=1, gpusPerNode=1), ["P"], None
    )


def test_node_env_on_cpu_and_gpu():
    base = {"PATH": "/bin", "AVIFLOW_NODE_RANK": "7", "ACCELERATE_USE_CPU": "true"}
    env = node_env(base, node(attempt=2, keep_last=5, job_tag="tiny-1234abcd"), job(), gpus=False)
    assert env == {
        "PATH": "/bin",
        "HF_HOME": "/hf",
        "AVIFLOW_RUN_DIR": "/runs/ada/tiny-1234abcd",
        "AVIFLOW_NODE_RANK": "1",
        "AVIFLOW_NUM_NODES": "2",
        "AVIFLOW_MAIN_ADDR": "tiny-0.tiny",
        "AVIFLOW_MAIN_PORT": "29500",
        "AVIFLOW_ATTEMPT": "2",
        "AVIFLOW_KEEP_LAST": "5",
        "AVIFLOW_JOB_TAG": "tiny-1234abcd",
        "PYTHONUNBUFFERED": "1",
        "ACCELERATE_USE_CPU": "true",
    }
    gpu = node_env(base, node(), job(), gpus=True)
    assert "ACCELERATE_USE_CPU" not in gpu


def test_runtime_env_round_trips_and_names_what_is_wrong():
    full = node(attempt=3, keep_last=2, log_to_store=False, device="cpu", job_tag="t")
    assert RuntimeEnv.from_env(full.to_env()) == full
    # an Indexed Job's pod template leaves the node out: JOB_COMPLETION_INDEX gives it
    shared = full.to_env(node_rank=False)
    assert "AVIFLOW_NODE_RANK" not in shared
    assert RuntimeEnv.from_env({**shared, "JOB_COMPLETION_INDEX": "3"}).node_rank == 3
    assert RuntimeEnv.from_env({**full.to_env(), "JOB_COMPLETION_INDEX": "0"}).node_rank == 0
    with pytest.raises(RuntimeEnvError, match="AVIFLOW_RUN_DIR is not set"):
        RuntimeEnv.from_env({})
    with pytest.raises(RuntimeEnvError, match="AVIFLOW_ATTEMPT='x' is not an integer"):
        RuntimeEnv.from_env({**full.to_env(), "AVIFLOW_ATTEMPT": "x"})
    with pytest.raises(RuntimeEnvError, match="AVIFLOW_NUM_NODES=0 must be at least 1"):
        RuntimeEnv.from_env({**full.to_env(), "AVIFLOW_NUM_NODES": "0"})
    assert process_rank({"RANK": "5"}) == 5 and process_rank({}) == 0


def test_outside_a_job_the_runtime_env_is_the_local_run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RuntimeEnv.current({}) == RuntimeEnv(run_dir=tmp_path / ".aviflow" / "run")


def test_the_device_override_wins_over_detection(tmp_path):
    nvidia = tmp_path / "nvidiactl"
    assert has_gpus(RuntimeEnv(RUN), nvidia) is False
    nvidia.touch()
    assert has_gpus(RuntimeEnv(RUN), nvidia) is True
    assert has_gpus(RuntimeEnv(RUN, device="cpu"), nvidia) is False
    assert has_gpus(RuntimeEnv(RUN, device="gpu"), tmp_path / "none") is True


def test_only_the_runtime_env_module_spells_the_runtime_variables():
    """One owner: no other module of the package names an AVIFLOW_* runtime variable."""
    import aviflow
    from aviflow.runtime import env

    root = Path(aviflow.__file__).parent
    owners = {}
    for path in root.rglob("*.py"):
        text = path.read_text()
        for name in env.NAMES:
            if f'"{name}"' in text:
                owners.setdefault(name, []).append(str(path.relative_to(root)))
    assert owners == {name: ["runtime/env.py"] for name in env.NAMES}
