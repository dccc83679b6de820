"""Data-aware scheduling under real Airflow (SQLite metadata DB): with ``EPOCHAL_SCHEDULE=assets``
the epoch DAG, once serialized, is scheduled on its sources' Assets -- an asset event for the
source's Asset (what a producer's ``outlets`` or the REST API records) queues it for a DAG run in
the scheduler's own query (``DagModel.dags_needing_dagruns``) -- and a run that finds no new input
short-circuits: every task after ``trigger_checkpoint`` is skipped and no checkpoint is taken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from state_store.core import checkpoint_history
from state_store.storage import open_store
from tests.integration.airflow.support import AIRFLOW_BIN, airflow_environment, dags_test

pytestmark = pytest.mark.integration
DAG = "epochal_clickstream"
ASSET = "epochal://clickstream/sources/clicks"

QUEUE_CHECK = """
import json, sys
from sqlalchemy import select
from airflow.assets.manager import AssetManager
from airflow.models.asset import AssetModel
from airflow.models.dag import DagModel
from airflow.utils.session import create_session

def due():
    with create_session() as session:
        _, triggered = DagModel.dags_needing_dagruns(session)
        return sorted(triggered)

before = due()
with create_session() as session:
    asset = session.scalar(select(AssetModel).where(AssetModel.uri == sys.argv[1]))
    AssetManager.register_asset_change(asset=asset, session=session)
print(json.dumps({"before": before, "after": due()}))
"""


def test_an_asset_event_makes_the_epoch_dag_due_and_a_run_without_input_short_circuits(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    uri = (tmp_path / "store").as_uri()
    env = airflow_environment(
        tmp_path_factory.mktemp("airflow_assets"),
        EPOCHAL_STORE_URI=uri,
        EPOCHAL_SCHEDULE="assets",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
    )
    subprocess.run(
        [AIRFLOW_BIN, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300
    )
    result = subprocess.run(
        [sys.executable, "-c", QUEUE_CHECK, ASSET],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    queue = json.loads(result.stdout.strip().splitlines()[-1])
    assert DAG not in queue["before"] and DAG in queue["after"]

    # epoch 0: the generator has produced nothing yet at the start time -- no new input
    run = dags_test(env, DAG, 0)
    logs = run.stdout + run.stderr
    assert run.returncode == 0, logs[-3000:]
    assert "status=skipped reason=no new input" in logs
    assert checkpoint_history(open_store(uri), "clickstream") == []
