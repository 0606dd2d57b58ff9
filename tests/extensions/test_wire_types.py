"""The generated TypeScript types (extensions/labextension/src/records.ts) accept what the
records write: a sample of every record (test/record_samples.ts, generated from
aviflow/wire_samples.py by ``make generate``) type-checks against them, and a sample the
records would never write does not. (Their currency: tests/core/test_wire.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aviflow import wire_gen

LABEXT = Path(__file__).resolve().parents[2] / "extensions" / "labextension"
TSC = LABEXT / "node_modules" / ".bin" / "tsc"
FLAGS = [
    "--noEmit",
    "--strict",
    "--skipLibCheck",
    "--target",
    "ES2022",
    "--moduleResolution",
    "node",
]


def tsc(*files: Path) -> subprocess.CompletedProcess[str]:
    assert TSC.exists(), "extensions/labextension has no npm packages: run `make labextension`"
    return subprocess.run(
        [str(TSC), *FLAGS, *map(str, files)],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_records_sample_type_checks_against_the_generated_interfaces() -> None:
    samples = LABEXT.parent.parent / wire_gen.TS_SAMPLES
    assert samples.read_text(encoding="utf-8") == wire_gen.typescript_samples(), (
        "run `make generate`"
    )
    proc = tsc(samples)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("record", "body", "error"),
    [
        ("FailureInfo", "{ attempt: 1, node: 'node-0' }", "TS2322"),  # node is a number
        ("JobSummary", "{ id: 'j' }", "TS2740"),  # required keys missing
        ("ExpectedStart", "{ low: 1, high: null, later: true }", "TS2353"),  # unknown key
        ("JobStatus", "{ state: 'LOST', attempt: 0 }", "TS2322"),
    ],
)
def test_a_sample_the_records_never_write_does_not(
    tmp_path: Path, record: str, body: str, error: str
) -> None:
    source = tmp_path / "wrong.ts"
    records = (LABEXT / "src" / "records").as_posix()
    source.write_text(
        f"import type {{ {record} }} from '{records}';\nexport const x: {record} = {body};\n"
    )
    proc = tsc(source)
    assert proc.returncode != 0 and f"error {error}" in proc.stdout, proc.stdout + proc.stderr
