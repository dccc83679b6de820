"""Helpers of the issue-19 review repros: a job with two completed checkpoints and a savepoint,
built through the ``epochal`` CLI in process (the same calls work on the code before issue 19)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_jobs.cli import main

RUN = ["--executor", "local", "--time-step-ms", "10000"]


def epochal(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``epochal argv...`` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def job_with_savepoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """(store URI, savepoint location) of clickstream after two epochs and savepoint ``sp1``."""
    store = (tmp_path / "store").as_uri()
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "2", *RUN)
    assert code == 0, err
    code, _, err = epochal(
        capsys,
        "savepoint",
        "--job",
        "clickstream",
        "--store",
        store,
        "--name",
        "sp1",
        "--time-step-ms",
        "10000",
    )
    assert code == 0, err
    return store, f"{store}/clickstream/savepoints/sp1"


def copy_savepoint(location: str, dst: Path) -> str:
    """Copy a ``file://`` savepoint folder to ``dst``; its new location."""
    shutil.copytree(Path(location.removeprefix("file://")), dst)
    return dst.as_uri()
