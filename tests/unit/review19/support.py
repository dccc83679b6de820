"""Helpers of the issue-19 review repros: a job with two completed checkpoints and a savepoint,
built through the ``epochal`` CLI in process (the same calls work on the code before issue 19)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.cli.support import RUN, epochal

__all__ = ["RUN", "copy_savepoint", "epochal", "job_with_savepoint"]


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
