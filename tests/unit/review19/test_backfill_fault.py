"""Review of issue 19: ``EPOCHAL_FAULT`` no longer reaches the epochs of ``epochal backfill``.

Before issue 19 every subtask read ``EPOCHAL_FAULT`` from its environment, so the task-side kill
points (``after_state_upload``, ``before_ack``, ``after_ack``) fired in a backfill's epochs and a
malformed value was refused (exit 2). Issue 19 ships the kill spec in ``EpochPlan.kill`` from the
entry points, but neither ``epochal backfill`` nor the Airflow ``BackfillOperator`` (which reads
``rt.kill`` and drops it) passes a switch: ``spark_jobs.lifecycle.backfill`` builds its
``EpochCycle`` with the no-op switch, so a drill of a backfill silently injects nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from state_store.testing import SimulatedCrash
from tests.unit.review19.support import epochal, job_with_savepoint


def test_a_kill_point_in_a_backfill_epoch_still_fires(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, location = job_with_savepoint(tmp_path, capsys)
    monkeypatch.setenv("EPOCHAL_FAULT", "after_state_upload")
    with pytest.raises(SimulatedCrash, match="after_state_upload"):
        epochal(
            capsys,
            "backfill", "--job", "clickstream", "--store", store, "--from-savepoint", location,
            "--new-job", "fork", "--epochs", "1",
        )  # fmt: skip
