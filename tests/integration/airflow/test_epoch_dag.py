"""The epoch-cycle DAG under real Airflow (``airflow dags test``, SQLite in a temporary
AIRFLOW_HOME): consecutive runs complete checkpoints; a run killed inside ``run_epoch`` fails, the
next run recovers and the committed output equals a fault-free run; the same DAG against SeaweedFS
S3 through an Airflow connection, with the credentials in neither the logs nor the XComs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from state_store.core import checkpoint_history
from state_store.storage import open_store
from state_store.testing.seaweedfs import SeaweedFSServer
from tests.integration.airflow.support import airflow_environment, is_paused, logical_date
from tests.integration.airflow.support import dags_test as run_dag
from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, new_clock, small_job

pytestmark = pytest.mark.integration
DAG = "epochal_clickstream"


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return airflow_environment(tmp_path_factory.mktemp("airflow_home"))


def dags_test(env: dict[str, str], epoch: int, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_dag(env, DAG, epoch, **extra)


def completed_ids(uri: str) -> list[int]:
    return [
        r.checkpoint_id for r in checkpoint_history(open_store(uri), "clickstream") if r.status == "completed"
    ]


def reference_rows(epochs: int) -> list[tuple[object, ...]]:
    import tempfile

    uri = Path(tempfile.mkdtemp()).as_uri()
    job, clock = small_job(), new_clock()
    for _ in range(epochs):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    return committed_rows(uri, job)


def test_consecutive_runs_complete_checkpoints_and_a_killed_run_recovers(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    env = {**airflow_env, "EPOCHAL_STORE_URI": uri}
    for epoch in (1, 2):
        result = dags_test(env, epoch)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    killed = dags_test(env, 3, EPOCHAL_FAULT="after_ack@3", EPOCHAL_FAULT_MODE="exit")
    assert killed.returncode != 0
    assert completed_ids(uri) == [1, 2]
    for epoch in (3, 4):  # the next run recovers: the dead run's checkpoint 3 is aborted
        result = dags_test(env, epoch)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "epochal complete_checkpoint" in result.stdout + result.stderr
    history = {r.checkpoint_id: r for r in checkpoint_history(open_store(uri), "clickstream")}
    assert history[3].status == "aborted" and "JOB_FAILOVER" in history[3].reason
    assert len(completed_ids(uri)) == 3  # retention keeps the newest 3 of the 4 completed
    assert max(completed_ids(uri)) == 5
    assert committed_rows(uri, small_job()) == reference_rows(4)


def test_the_same_dag_on_seaweedfs_through_an_airflow_connection_keeps_credentials_secret(
    airflow_env: dict[str, str], seaweedfs: SeaweedFSServer
) -> None:
    seaweedfs.make_store("epochal-airflow")
    connection = {
        "conn_type": "aws",
        "login": seaweedfs.access_key,
        "password": seaweedfs.secret_key,
        "extra": {"endpoint_url": seaweedfs.endpoint_url, "region_name": seaweedfs.region},
    }
    env = {
        **airflow_env,
        "EPOCHAL_STORE_URI": "s3://epochal-airflow/jobs",
        "EPOCHAL_STORE_CONN_ID": "epochal_s3",
        "AIRFLOW_CONN_EPOCHAL_S3": json.dumps(connection),
    }
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(key, None)
    outputs = []
    for epoch in (1, 2, 3):
        result = dags_test(env, epoch)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(result.stdout + result.stderr)
    store = seaweedfs.make_store("epochal-airflow", "jobs")
    assert [r.status for r in checkpoint_history(store, "clickstream")] == ["completed"] * 3
    logs = "\n".join(outputs)
    assert seaweedfs.secret_key not in logs and seaweedfs.access_key not in logs
    database = Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db"
    assert seaweedfs.secret_key.encode() not in database.read_bytes()  # XComs and rendered fields
    for log_file in Path(airflow_env["AIRFLOW_HOME"]).rglob("*.log"):
        assert seaweedfs.secret_key not in log_file.read_text(errors="replace")


def test_savepoint_restore_and_backfill_dags(airflow_env: dict[str, str], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    env = {**airflow_env, "EPOCHAL_STORE_URI": uri}
    for epoch in (1, 2):
        assert dags_test(env, epoch).returncode == 0

    def manual(dag_id: str, conf: dict[str, object]) -> str:
        result = subprocess.run(
            [env["AIRFLOW_BIN"], "dags", "test", dag_id, logical_date(2), "-c", json.dumps(conf)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout + result.stderr

    manual("epochal_savepoint", {"name": "sp-1"})
    location = f"{uri}/clickstream/savepoints/sp-1"
    import pandas as pd

    assert len(pd.read_parquet(location.removeprefix("file://") + "/dedup/state.parquet")) > 0
    before = [r.checkpoint_id for r in checkpoint_history(open_store(uri), "clickstream")]
    logs = manual("epochal_restore", {"source": location, "dry_run": True})
    assert "ACTION" in logs and "dedup" in logs
    assert [r.checkpoint_id for r in checkpoint_history(open_store(uri), "clickstream")] == before
    manual("epochal_restore", {"source": location, "dry_run": False})
    assert completed_ids(uri)[-1] > max(before)
    manual("epochal_backfill", {"savepoint": location, "new_job_id": "clickstream-bf", "epochs": 2})
    assert len(committed_rows(uri, small_job(), sink="page-counts-sink")) > 0
    from spark_jobs.sinks import read_committed

    assert read_committed(open_store(uri), "clickstream-bf", "page-counts-sink").num_rows > 0


def test_failure_rate_exceeded_fails_the_run_and_pauses_the_dag(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    env = airflow_environment(
        tmp_path_factory.mktemp("airflow_failure_rate"),
        EPOCHAL_STORE_URI=uri,
        EPOCHAL_RESTART="failure-rate:0:3600",  # no failure tolerated per hour (of the epochs' clock)
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
    )
    killed = run_dag(env, DAG, 1, EPOCHAL_FAULT="after_ack@1", EPOCHAL_FAULT_MODE="exit")
    assert killed.returncode != 0
    assert is_paused(env, DAG) is False
    stopped = run_dag(env, DAG, 2)  # its trigger aborts the dead checkpoint 1: one failure > 0
    logs = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0
    assert "failure-rate restart strategy of job clickstream exceeded: 1 failed checkpoints [1]" in logs
    assert f"DAG {DAG} paused" in logs
    assert is_paused(env, DAG) is True  # read back from the metadata DB
    history = checkpoint_history(open_store(uri), "clickstream")
    assert [(r.checkpoint_id, r.status) for r in history] == [(1, "aborted")]  # no epoch 2 triggered
