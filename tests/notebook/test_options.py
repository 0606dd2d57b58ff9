"""``%%aviflow_train`` options: parsing, the spec they build, and every refusal.

A refused cell submits nothing: each refusal test checks the run store stays empty.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from aviflow._flags import spec_flags
from aviflow_magics._build import build_job, check_syntax, gpu_hours_requested
from aviflow_magics._options import (
    OWN_FLAGS,
    OptionError,
    TrainOptions,
    build_parser,
    help_text,
    parse_train_options,
)

BODY = "print('hello')\n"


def _store_is_empty(root: Path) -> bool:
    return not root.exists() or not any(root.iterdir())


def test_every_option_parses() -> None:
    line = (
        "--nodes 2 --gpus-per-node 8 --queue research --name 'bert base' --image reg.example.com/t:1 "
        "--runtime infiniband --time-limit 2h --hang-timeout 10m --env LR=3e-4 "
        "--env 'NOTE=two words' --secret hf-token --secret wandb --secret hf-token "
        "--max-restarts 3 --resume auto --mixed-precision bf16 --strategy fsdp "
        "--fsdp-sharding grad-op --fsdp-offload --activation-checkpointing "
        "--accelerate-config fsdp.yaml --spec train.yaml --vars data,cfg "
        "--out job --dry-run --wait --backend local"
    )
    opts = parse_train_options(line)
    assert opts == TrainOptions(
        spec_values={
            "nodes": 2,
            "gpus_per_node": 8,
            "queue": "research",
            "name": "bert base",
            "image": "reg.example.com/t:1",
            "runtime": "infiniband",
            "time_limit": "2h",
            "hang_timeout": "10m",
            "env": {"LR": "3e-4", "NOTE": "two words"},
            "secrets": ("hf-token", "wandb"),
            "max_restarts": 3,
            "mixed_precision": "bf16",
            "strategy": "fsdp",
            "fsdp_sharding": "grad-op",
            "fsdp_offload": True,
            "activation_checkpointing": True,
            "accelerate_config": "fsdp.yaml",
        },
        resume="auto",
        spec="train.yaml",
        vars=("data", "cfg"),
        out="job",
        dry_run=True,
        wait=True,
        backend="local",
    )
    assert (opts.nodes, opts.env["LR"], opts.secrets) == (2, "3e-4", ("hf-token", "wandb"))
    # the line above gives every option the magic has
    given = {word.split("=")[0] for word in line.split() if word.startswith("--")}
    assert given == set(build_parser()._option_string_actions)


def test_defaults() -> None:
    assert parse_train_options("") == TrainOptions()
    assert (TrainOptions().nodes, TrainOptions().env, TrainOptions().secrets) == (None, {}, ())
    assert parse_train_options("--resume tiny-3f9a1c2b").resume == "tiny-3f9a1c2b"
    assert parse_train_options("--nodes=3").nodes == 3
    with pytest.raises(AttributeError):
        _ = TrainOptions().no_such_option


def test_help_documents_every_option_with_an_example() -> None:
    """Every option's help shows an example of it (or the examples do); a spec flag's help
    is its field's description (aviflow/spec_flags.json, from the spec model) and ends with
    its example."""
    examples = help_text().split("Examples:")[1]
    actions = [a for a in build_parser()._actions if a.option_strings]
    assert len(actions) == len(spec_flags()) + len(OWN_FLAGS)
    for action in actions:
        flag = action.option_strings[0]
        assert f"e.g. {flag}" in str(action.help) or flag in examples, flag
    for row in spec_flags():
        help_ = str(build_parser()._option_string_actions[row["flag"]].help)
        assert help_.endswith(f"e.g. {row['flag']} {row['example'] or ''}".rstrip())
    text = help_text()
    for row in spec_flags():
        assert row["flag"] in text
        words = " ".join(row["description"].split())
        assert words in " ".join(text.split()), row["flag"]


def test_magic_docstring_is_the_help(shell) -> None:
    magic = shell.find_cell_magic("aviflow_train")
    assert magic.__doc__ == help_text()


def test_spec_from_flags() -> None:
    job = build_job(
        parse_train_options(
            "--nodes 2 --gpus-per-node 4 --queue research --time-limit 90m --env A=1 --max-restarts 2 "
            "--mixed-precision fp16 --name demo --image reg.example.com/t:1 "
            "--secret hf-token --secret wandb --secret hf-token"
        ),
        BODY,
    )
    assert job.to_dict() == {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "demo", "labels": {}},
        "spec": {
            "queue": "research",
            "nodes": 2,
            "gpusPerNode": 4,
            "image": "reg.example.com/t:1",
            "script": BODY,
            "env": {"A": "1"},
            "accelerate": {"mixedPrecision": "fp16"},
            "checkpoints": {"keepLast": 3},
            "maxRestarts": 2,
            "timeLimit": "90m",
            "hangTimeout": "30m",
            "secrets": ["hf-token", "wandb"],
        },
    }
    assert gpu_hours_requested(job) == 12.0


def test_spec_file_gives_defaults_and_flags_override() -> None:
    base = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "from-file", "labels": {"team": "nlp"}},
        "spec": {
            "nodes": 4,
            "gpusPerNode": 8,
            "scriptFile": "train.py",
            "queue": "research",
            "env": {"A": "1", "B": "2"},
            "accelerate": {"mixedPrecision": "bf16"},
            "checkpoints": {"keepLast": 5},
        },
    }
    job = build_job(parse_train_options("--nodes 1 --env B=3 --env C=4"), BODY, base=base)
    assert job.metadata.name == "from-file"
    assert job.metadata.labels == {"team": "nlp"}
    assert (job.spec.nodes, job.spec.gpus_per_node, job.spec.queue) == (1, 8, "research")
    assert job.spec.env == {"A": "1", "B": "3", "C": "4"}
    assert job.spec.script == BODY and job.spec.script_file is None
    assert job.spec.accelerate.mixed_precision == "bf16"
    assert job.spec.checkpoints.keep_last == 5
    assert gpu_hours_requested(job) is None


def test_default_name_is_used_without_name_or_spec() -> None:
    assert build_job(TrainOptions(), BODY, default_name="train-bert").metadata.name == "train-bert"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--nodes", "argument --nodes: expected one argument"),
        ("--nodes two", "argument --nodes: must be an integer, got 'two'"),
        ("--nodes 0", "argument --nodes: must be at least 1, got 0"),
        ("--gpus-per-node 0", "argument --gpus-per-node: must be at least 1, got 0"),
        ("--max-restarts -1", "argument --max-restarts: must be at least 0, got -1"),
        ("--env FOO", "argument --env: expected K=V, got 'FOO'"),
        ("--env 1X=2", "argument --env: '1X' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
        ("--env A=1 --env A=2", "argument --env: A is given twice"),
        ("--resume Bad_Id", "argument --resume: expected auto, never or a job id, got 'Bad_Id'"),
        (
            "--mixed-precision fp32",
            "argument --mixed-precision: invalid choice: 'fp32' (choose from 'no', 'fp16', 'bf16', 'fp8')",
        ),
        ("--vars", "argument --vars: expected one argument"),
        (
            "--vars a,,b",
            "argument --vars: expected comma-separated names like 'data,config', got 'a,,b'",
        ),
        ("--vars ok,ok", "argument --vars: a variable is named twice in 'ok,ok'"),
        ("--vars class", "argument --vars: 'class' is not a notebook variable name"),
        ("--out 1x", "argument --out: '1x' is not a notebook variable name"),
        ("--out __x", "argument --out: '__x' is not a notebook variable name"),
        ("--name ''", "argument --name: must not be empty"),
        ("--node 2", "unrecognized argument '--node'; did you mean --nodes?"),
        ("--no-such-flag", "unrecognized argument '--no-such-flag'"),
        ("positional", "unrecognized argument 'positional'"),
        ("--wait extra", "unrecognized argument 'extra'"),
        ("--dry-run=yes", "argument --dry-run: ignored explicit argument 'yes'"),
        ("--nodes 2 'unterminated", "cannot split the option line: No closing quotation"),
    ],
)
def test_bad_options(line: str, message: str, shell, run_root: Path) -> None:
    with pytest.raises(OptionError) as parsed:
        parse_train_options(line)
    assert str(parsed.value) == message
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("aviflow_train", line, BODY)
    assert str(raised.value) == f"{message}; nothing was submitted"
    assert _store_is_empty(run_root)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "--gpus-per-node 9",
            "SpecError: spec.gpusPerNode: must be between 1 and 8 (an HGX node has 8 GPUs), got 9; use more nodes for more GPUs",
        ),
        (
            "--queue Research",
            "SpecError: spec.queue: 'Research' is not a queue name; use lowercase letters, digits and '-' (at most 63)",
        ),
        (
            "--name a/b",
            "SpecError: metadata.name: 'a/b' contains a slash, backslash or control character; use letters, digits, '-', '_' or '.'",
        ),
        (
            "--env RANK=3",
            "SpecError: spec.env: RANK is set by the Aviflow runtime and cannot be overridden",
        ),
        ("--time-limit 31d", "SpecError: spec.timeLimit: '31d' is out of range; give 1s to 30d"),
        (
            "--image 'bad image'",
            "SpecError: spec.image: 'bad image' is not an image reference, e.g. 'registry.example.com/trainer:1.0'",
        ),
        (
            "--accelerate-config /nonexistent/fsdp.yaml",
            "SpecError: spec.accelerate.configFile: /nonexistent/fsdp.yaml does not exist or is not a regular file",
        ),
        (
            "--spec /nonexistent/train.yaml",
            "--spec: /nonexistent/train.yaml does not exist or is not a file",
        ),
        ("--backend nosuch", None),
        (
            "--nodes 5 --gpus-per-node 2",
            "BackendError: 'notebook' needs 10 GPU slots (5 nodes x 2) but this local backend has 8; lower spec.nodes/gpusPerNode or raise AVIFLOW_LOCAL_CAPACITY",
        ),
        ("--resume nope-123", "--resume: no job 'nope-123'; %aviflow_jobs lists your jobs"),
        ("--vars missing", "--vars: 'missing' is not defined in this notebook"),
        ("--vars lock", "--vars: cannot ship 'lock' (lock): cannot pickle '_thread.lock' object"),
    ],
)
def test_refused_before_submission(
    line: str, message: str | None, shell, run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AVIFLOW_LOCAL_CAPACITY", "8")
    shell.user_ns["lock"] = threading.Lock()
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("aviflow_train", line, BODY)
    if message is None:
        assert str(raised.value).startswith("BackendError: unknown backend 'nosuch'; available: ")
        assert "local" in str(raised.value)
    else:
        assert str(raised.value) == f"{message}; nothing was submitted"
    assert _store_is_empty(run_root)


def test_bad_spec_file_is_refused(shell, run_root: Path, tmp_path: Path) -> None:
    spec = tmp_path / "train.yaml"
    spec.write_text(
        "apiVersion: aviflow.dev/v1\nkind: TrainJob\nmetadata: {name: x}\n"
        "spec: {nodes: 1, node: 2, script: 'x'}\n"
    )
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("aviflow_train", f"--spec {spec}", BODY)
    assert (
        str(raised.value)
        == "SpecError: spec.node: unknown key; did you mean 'nodes'?; nothing was submitted"
    )
    assert _store_is_empty(run_root)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "x = (1,\n",
            "SyntaxError at line 2 of the cell (train.py line 1): '(' was never closed: 'x = (1,'",
        ),
        (
            "print(1)\nif True\n    pass\n",
            "SyntaxError at line 3 of the cell (train.py line 2): expected ':': 'if True'",
        ),
        (
            "!pip install x\n",
            "SyntaxError at line 2 of the cell (train.py line 1): invalid syntax: '!pip install x'",
        ),
        ("   \n", "the cell is empty; its body is the training script run on every rank"),
    ],
)
def test_syntax_errors_are_refused_with_the_line(
    body: str, message: str, shell, run_root: Path
) -> None:
    with pytest.raises(OptionError) as checked:
        check_syntax(body)
    assert str(checked.value) == message
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("aviflow_train", "--nodes 1", body)
    assert str(raised.value) == f"{message}; nothing was submitted"
    assert _store_is_empty(run_root)


def test_a_refusal_is_one_line_in_the_notebook(
    shell, run_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell("%%aviflow_train --nodes two\nprint(1)\n")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "UsageError: argument --nodes: must be an integer, got 'two'; nothing was submitted"
    ]
    assert _store_is_empty(run_root)


def test_the_magic_options_are_derived_from_the_spec_model() -> None:
    """Every option but the magic's own sets a spec field, with the field's choices and
    minimum: a new mixed-precision mode or a renamed key shows up in the magic without an
    edit there (tests/core/test_spec_flags.py checks the table against the model)."""
    import typing

    from aviflow.spec import TrainJob

    parser = build_parser()
    rows = {r["flag"]: r for r in spec_flags()}
    assert set(parser._option_string_actions) == set(rows) | set(OWN_FLAGS)
    assert "--hang-timeout" in rows and "--secret" in rows
    for flag, row in rows.items():
        action = parser._option_string_actions[flag]
        assert action.dest == row["dest"]
        assert action.choices == (tuple(row["choices"]) if "choices" in row else None)
        if "minimum" in row:
            below = f"{flag} {row['minimum'] - 1}"
            with pytest.raises(OptionError, match=f"must be at least {row['minimum']}"):
                parse_train_options(below)
        # the option reaches the spec at the field's key
        value = True if row["kind"] == "bool" else row["example"]
        line = f"{flag} {row['example']}" if row["kind"] != "bool" else flag
        if row["key"][:3] == ["spec", "accelerate", "fsdp"]:
            line += " --strategy fsdp"
        data = build_job(parse_train_options(line), BODY).to_dict()
        for key in row["key"]:
            data = data[key]
        if row["kind"] == "int":
            value = int(value)
        elif row["kind"] == "map":
            value = dict([value.split("=", 1)])
        elif row["kind"] == "list":
            value = [value]
        assert data == value, flag
    mixed = TrainJob.model_fields["spec"].annotation.model_fields["accelerate"].annotation
    assert parser._option_string_actions["--mixed-precision"].choices == typing.get_args(
        mixed.model_fields["mixed_precision"].annotation
    )


def test_a_strategy_preset_from_the_option_line_reaches_the_spec() -> None:
    from aviflow.errors import SpecError
    from aviflow.spec import FsdpSpec

    line = "--strategy fsdp --fsdp-sharding grad-op --activation-checkpointing"
    job = build_job(parse_train_options(line), "print('hi')\n")
    assert job.to_dict()["spec"]["accelerate"] == {
        "mixedPrecision": "no",
        "strategy": "fsdp",
        "fsdp": {"sharding": "grad-op", "offload": False, "activationCheckpointing": True},
    }
    base = {"spec": {"accelerate": {"strategy": "fsdp", "fsdp": {"offload": True}}}}
    job = build_job(parse_train_options("--fsdp-sharding full"), "pass\n", base=base)
    assert job.spec.accelerate.fsdp == FsdpSpec(sharding="full", offload=True)
    with pytest.raises(SpecError, match="fsdp options need strategy: fsdp"):
        build_job(parse_train_options("--fsdp-offload"), "pass\n")


def test_the_llm_notebook_asks_for_fsdp_through_the_magic() -> None:
    import nbformat

    from aviflow.examples.notebook import LLM_TRAIN, llm_notebook

    nbformat.validate(nbformat.from_dict(llm_notebook()))
    line, _, body = LLM_TRAIN.partition("\n")
    assert line.startswith("%%aviflow_train ")
    job = build_job(parse_train_options(line.removeprefix("%%aviflow_train ")), body + "\n")
    assert (job.spec.nodes, job.spec.gpus_per_node) == (2, 2)
    assert job.spec.accelerate.strategy == "fsdp"
    assert "from aviflow.examples.llm import main" in job.spec.script
