"""An operator misusing the approval under real Airflow (issue 22 review): ``airflow dags test
epochal_restore`` plus a real ``airflow api-server`` answering through the HITL REST API (the
harness of tests/integration/airflow/test_restore_approval.py).

* a second answer (approve twice, approve after reject) is refused by Airflow (409); the restore
  applies once, or not at all;
* an approval while an epoch run holds the job's lease is refused with one line, nothing written;
* a savepoint replaced under the same name (same job, same shape, other bytes) while the approval
  waits is refused: the approved plan never applies to other bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.lifecycle.snapshots import savepoint_location
from state_store.lease_keeper import HeldLease
from state_store.storage import open_store
from tests.integration.airflow.test_restore_approval import (
    DAG_ID,
    TASK,
    Airflow,
    finish,
    generation,
    store_bytes,
    two_epochs,
)
from tests.unit.runtime.support import STEP_MS, cycle, new_clock, small_job

pytestmark = pytest.mark.integration


def second_answer(airflow: Airflow, run_id: str, option: str) -> int:
    status, _ = airflow.call(
        "PATCH",
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK}/-1/hitlDetails",
        {"chosen_options": [option], "params_input": {}},
    )
    return status


def test_a_second_answer_is_refused_and_the_restore_applies_once(airflow: Airflow, tmp_path: Path) -> None:
    uri = two_epochs(tmp_path)
    log = tmp_path / "approve.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    airflow.answer(run_id, "Approve")
    assert second_answer(airflow, run_id, "Approve") == 409  # approve twice
    assert second_answer(airflow, run_id, "Reject") == 409  # or change one's mind afterwards
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert logs.count("epochal restore: job=") == 1 and generation(uri) == 2  # one import

    uri = two_epochs(tmp_path / "rejected")
    before = store_bytes(uri)
    log = tmp_path / "reject.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    airflow.answer(run_id, "Reject")
    assert second_answer(airflow, run_id, "Approve") == 409  # approve after reject
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert store_bytes(uri) == before


def test_an_approval_while_an_epoch_run_holds_the_lease_is_refused(airflow: Airflow, tmp_path: Path) -> None:
    uri = two_epochs(tmp_path)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    epoch = HeldLease(
        open_store(uri),
        "clickstream",
        "airflow:epochal_clickstream:scheduled__1",
        "epochal_clickstream.run_epoch",
    )
    with epoch:  # an epoch DAG run holds the job
        held = store_bytes(uri)
        airflow.answer(run_id, "Approve")
        logs = finish(proc, log)
        assert store_bytes(uri) == held  # the restore wrote nothing, not even the lease
    assert proc.returncode != 0
    assert (
        "job clickstream is busy (" in logs
        and "since its restore plan was approved: nothing was restored" in logs
    )
    assert generation(uri) == 1


def test_a_savepoint_replaced_while_its_approval_waits_is_refused(airflow: Airflow, tmp_path: Path) -> None:
    stores = {}
    for name, rate in (("prod", 40), ("staging", 80)):  # one job, one shape, other state
        uri = (tmp_path / name).as_uri()
        job, clock = small_job(events_per_second=rate), new_clock()
        for _ in range(3):
            clock.advance(STEP_MS)
            cycle(job, uri, clock)
        take_savepoint(job, uri, clock, "sp")
        stores[name] = uri
    location = savepoint_location(stores["prod"], "clickstream", "sp")
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(stores["prod"], log, source=location, parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    folder = Path(location.removeprefix("file://"))
    shutil.rmtree(folder)
    shutil.copytree(
        Path(savepoint_location(stores["staging"], "clickstream", "sp").removeprefix("file://")), folder
    )
    before = store_bytes(stores["prod"])
    airflow.answer(run_id, "Approve")
    logs = finish(proc, log)
    assert proc.returncode != 0
    assert f"the snapshot at {location} is not the one approved for job clickstream" in logs
    assert store_bytes(stores["prod"]) == before and generation(stores["prod"]) == 1


def test_airflows_rest_api_and_cli_backfill_of_an_epoch_dag_are_refused(
    airflow: Airflow, tmp_path: Path
) -> None:
    import sqlite3
    import subprocess

    window = {
        "dag_id": "epochal_clickstream",
        "from_date": "2024-01-01T00:00:00Z",
        "to_date": "2024-01-01T03:00:00Z",
    }
    # periodic, so only its run types can refuse it (the api-server caches a DAG once read)
    env = {**airflow.env, "EPOCHAL_STORE_URI": (tmp_path / "store").as_uri(), "EPOCHAL_SCHEDULE": "@hourly"}
    synced = subprocess.run(
        [env["AIRFLOW_BIN"], "dags", "reserialize"], env=env, capture_output=True, text=True
    )
    assert synced.returncode == 0, synced.stderr[-3000:]
    status, body = airflow.call("POST", "/api/v2/backfills", window)  # what the UI's Backfill button calls
    assert status == 400 and "'epochal_clickstream' does not allow backfill runs" in body, body
    legacy = subprocess.run(  # Airflow 2's command is gone, not a way around the refusal
        [env["AIRFLOW_BIN"], "dags", "backfill", "epochal_clickstream", "-s", "2024-01-01"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert legacy.returncode != 0 and "Command `dags backfill` has been removed" in legacy.stderr
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db", timeout=30) as db:
        assert db.execute("SELECT count(*) FROM dag_run WHERE dag_id = 'epochal_clickstream'").fetchone() == (
            0,
        )
    assert not (tmp_path / "store").exists()
