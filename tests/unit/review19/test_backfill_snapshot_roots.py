"""Review of issue 19: ``EPOCHAL_SNAPSHOT_ROOTS`` no longer reaches ``epochal backfill``.

Before issue 19, ``spark_jobs.restore.configured_roots`` read ``EPOCHAL_SNAPSHOT_ROOTS`` itself, so
every restore -- including the one a backfill starts with -- refused a savepoint outside the
configured roots. Issue 19 moved the read to the entry points (``epochal restore`` and the Airflow
``RestoreOperator``), but ``epochal backfill`` (``spark_jobs.cli._cmd_backfill``) and the Airflow
``BackfillOperator`` call ``spark_jobs.lifecycle.backfill.backfill``, whose ``RestoreRequest`` has no
roots: a savepoint from anywhere is now imported and reprocessed into the fork's sinks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.review19.support import copy_savepoint, epochal, job_with_savepoint


def test_backfill_refuses_a_savepoint_outside_the_configured_snapshot_roots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, location = job_with_savepoint(tmp_path, capsys)
    outside = copy_savepoint(location, tmp_path / "elsewhere" / "sp1")
    monkeypatch.setenv("EPOCHAL_SNAPSHOT_ROOTS", (tmp_path / "approved").as_uri())
    # the restore command honours the roots (a precondition: true before and after issue 19)
    code, _, err = epochal(
        capsys, "restore", "--job", "clickstream", "--store", store, "--from", outside, "--dry-run"
    )
    assert code == 2 and "outside the configured snapshot roots" in err, err
    # ... and so must the backfill, which restores the same savepoint into a new job
    code, out, err = epochal(
        capsys,
        "backfill", "--job", "clickstream", "--store", store, "--from-savepoint", outside,
        "--new-job", "fork", "--epochs", "1",
    )  # fmt: skip
    assert code == 2 and "outside the configured snapshot roots" in err, (code, out, err)
    assert not (tmp_path / "store" / "fork" / "checkpoints").exists()
