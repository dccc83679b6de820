"""The job's lease in real Airflow (issue 18): an ``epochal_restore`` DAG run triggered while an
``epochal_<job>`` DAG run holds the lease defers (the trigger waits in the triggerer, inline under
``airflow dags test``) instead of failing, restores once the epoch run released the lease, and the
epoch output stays exactly once. Each ``airflow dags test`` gets its own SQLite home; they share
only the Epochal store, where the lease lives."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from state_store.core import JobRecords
from state_store.storage import open_store
from tests.integration.airflow.support import airflow_environment, dags_test, logical_date
from tests.integration.airflow.test_epoch_dag import reference_rows
from tests.unit.runtime.support import STEP_MS, committed_rows, new_clock, small_job

pytestmark = pytest.mark.integration
DAG = "epochal_clickstream"


def test_a_restore_dag_run_during_an_epoch_dag_run_defers_then_restores_and_output_stays_exactly_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    epoch_env = airflow_environment(tmp_path_factory.mktemp("airflow_epoch"), EPOCHAL_STORE_URI=uri)
    restore_env = airflow_environment(tmp_path_factory.mktemp("airflow_restore"), EPOCHAL_STORE_URI=uri)
    first = dags_test(epoch_env, DAG, 1)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    epoch_log = tmp_path / "epoch.log"  # a file, not a pipe: a full pipe would stall the run
    epoch = subprocess.Popen(  # its complete_checkpoint stalls 30 s before deciding: the job stays busy
        [epoch_env["AIRFLOW_BIN"], "dags", "test", DAG, logical_date(2)],
        env={**epoch_env, "EPOCHAL_FAULT": "before_decision@2", "EPOCHAL_FAULT_MODE": "pause:30"},
        stdout=epoch_log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    records = JobRecords(open_store(uri), "clickstream")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the epoch run took the lease in trigger_checkpoint
        record = records.read()
        if (
            record is not None
            and record.lease is not None
            and record.lease.holder.startswith(f"airflow:{DAG}:")
        ):
            break
        assert epoch.poll() is None, "the epoch DAG run ended before it was seen holding the lease"
        time.sleep(0.2)
    else:
        pytest.fail("the epoch DAG run never held the job's lease")
    restore = subprocess.run(
        [
            restore_env["AIRFLOW_BIN"],
            "dags",
            "test",
            "epochal_restore",
            logical_date(2),
            "-c",
            json.dumps({"source": "latest", "dry_run": False}),
        ],
        env=restore_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    epoch.wait(timeout=600)
    epoch_logs = epoch_log.read_text()
    restore_logs = restore.stdout + restore.stderr
    assert epoch.returncode == 0, epoch_logs[-3000:]
    assert restore.returncode == 0, restore_logs[-3000:]
    assert "deferring until the job's lease is free" in restore_logs
    assert "running trigger in line" in restore_logs
    assert "Task failed" not in restore_logs and "Task failed" not in epoch_logs
    record = records.read()
    assert record is not None and record.lease is None and record.generation == 2  # restored once
    third = dags_test(epoch_env, DAG, 3)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert committed_rows(uri, small_job()) == reference_rows(3)


def test_a_rescaling_restore_sticks_for_the_epoch_dag(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """After ``restore --parallelism 3`` every later epoch DAG run runs 3 subtasks per keyed stage
    (the job's code still says 2), and the trigger task's log says so."""
    from spark_jobs.lifecycle.restore import RestoreRequest, restore
    from state_store.core import CompletedCheckpointStore, JobLayout

    uri = (tmp_path / "store").as_uri()
    env = airflow_environment(tmp_path_factory.mktemp("airflow_rescale"), EPOCHAL_STORE_URI=uri)
    assert dags_test(env, DAG, 1).returncode == 0
    clock = new_clock()
    clock.advance(STEP_MS)
    restore(small_job(), uri, clock, RestoreRequest(source="latest"), parallelism=3)
    for epoch in (2, 3):
        result = dags_test(env, DAG, epoch)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "parallelism=3" in result.stdout + result.stderr
        completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("clickstream"), 1)
        latest = completed.latest()
        assert latest is not None
        assert len([t for t in latest.metadata.tasks if t.task.uid == "page-counts"]) == 3
