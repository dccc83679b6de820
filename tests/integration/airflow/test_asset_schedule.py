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


EVENTS = """
import json
from sqlalchemy import select
from airflow.models.asset import AssetEvent
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
with create_session() as session:
    events = [{"uri": e.asset.uri, "extra": e.extra} for e in session.scalars(select(AssetEvent))]
    print(json.dumps({"events": events, "due": sorted(DagModel.dags_needing_dagruns(session)[1])}))
"""


def test_a_file_dropped_into_a_landing_zone_queues_an_epoch_through_the_real_triggerer(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asset of a ``PrefixSource`` carries an ``AssetWatcher``: ``airflow triggerer`` runs its
    trigger, which lists the landing zone; one dropped file becomes one asset event (its payload
    says what waits) and the epoch DAG is due -- no producer task, no REST call."""
    import os
    import signal
    import time

    from tests.integration.airflow.support import free_port
    from tests.unit.airflow import landing_watch_job as watched

    monkeypatch.setenv(watched.ROOT_ENV, str(tmp_path))
    home = tmp_path_factory.mktemp("airflow_watch")
    env = airflow_environment(
        home,
        EPOCHAL_JOBS="tests.unit.airflow.landing_watch_job:job",
        EPOCHAL_STORE_URI=(tmp_path / "store").as_uri(),
        EPOCHAL_SCHEDULE="assets",
        EPOCHAL_LANDING_POLL_S="0.5",
        LANDING_WATCH_ROOT=str(tmp_path),
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
    )
    subprocess.run(
        [AIRFLOW_BIN, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300
    )

    def recorded() -> dict[str, list]:  # type: ignore[type-arg]
        out = subprocess.run(
            [sys.executable, "-c", EVENTS], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    log = (home / "triggerer.log").open("w")
    triggerer = subprocess.Popen(
        [AIRFLOW_BIN, "triggerer"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        time.sleep(5)
        assert recorded()["events"] == []  # an empty landing zone: nothing announced
        watched.drop("orders", "2026-11-26-0001.json", [1, 2, 3])
        deadline = time.monotonic() + 120
        while not (seen := recorded())["events"]:
            assert triggerer.poll() is None, (home / "triggerer.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (home / "triggerer.log").read_text()[-3000:]
            time.sleep(2)
        time.sleep(3)  # later polls see the same backlog: no second event
        seen = recorded()
    finally:
        os.killpg(triggerer.pid, signal.SIGTERM)
        triggerer.wait(60)
        log.close()
    (event,) = seen["events"]
    assert event["uri"] == (tmp_path / "landing").as_uri()
    payload = event["extra"]["payload"]
    assert (payload["job_id"], payload["source"], payload["files"]) == ("watched", "drops", 1)
    assert payload["oldest"] == "orders/2026-11-26-0001.json" and event["extra"]["from_trigger"] is True
    assert seen["due"] == ["epochal_watched"]
