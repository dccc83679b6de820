"""Airflow's own backfill of an epoch DAG is refused before any run exists (issue 22), by real
Airflow: ``airflow dags reserialize`` writes the DAGs to a SQLite metadata DB, then ``airflow
backfill create`` -- what the UI's Backfill button and ``POST /api/v2/backfills`` call too -- refuses
``epochal_clickstream`` (its ``allowed_run_types`` leave out ``backfill``): no backfill, no DAG run,
no store. Reprocessing history is ``epochal_backfill``'s job (docs/operations.md, "Backfill")."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.integration.airflow.support import airflow_environment

pytestmark = pytest.mark.integration
DAG = "epochal_clickstream"


def airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([env["AIRFLOW_BIN"], *args], env=env, capture_output=True, text=True, timeout=300)


def test_airflow_backfill_of_an_epoch_dag_is_refused_before_any_run_exists(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    env = airflow_environment(
        tmp_path_factory.mktemp("airflow_backfill"),
        EPOCHAL_STORE_URI=store.as_uri(),
        EPOCHAL_SCHEDULE="@hourly",  # periodic: Airflow would otherwise refuse it for that reason
    )
    synced = airflow(env, "dags", "reserialize")
    assert synced.returncode == 0, synced.stderr[-3000:]
    database = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    with sqlite3.connect(database) as db:
        (types,) = db.execute("SELECT allowed_run_types FROM dag WHERE dag_id = ?", (DAG,)).fetchone()
    assert "scheduled" in types and "manual" in types and "backfill" not in types
    result = airflow(
        env,
        "backfill",
        "create",
        "--dag-id",
        DAG,
        "--from-date",
        "2024-01-01T00:00:00+00:00",
        "--to-date",
        "2024-01-01T03:00:00+00:00",
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert f"Dag with dag_id: '{DAG}' does not allow backfill runs" in output
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT count(*) FROM backfill").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM dag_run WHERE dag_id = ?", (DAG,)).fetchone() == (0,)
    assert not store.exists()  # nothing of the job was touched
    # the manual DAG that does reprocess history is there, with its savepoint parameter
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT count(*) FROM dag WHERE dag_id = 'epochal_backfill'").fetchone() == (1,)
