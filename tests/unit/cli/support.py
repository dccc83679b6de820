"""Helpers for tests that drive the ``epochal`` CLI in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.cli import main

RUN = ["--executor", "local", "--time-step-ms", "10000"]
"""``epochal run`` in process, one epoch per 10 s of simulated time."""


def epochal(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``epochal argv...`` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def files(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` and its bytes (to prove a command changed nothing)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
