"""What Airflow can still do to an epoch DAG once its backfill is refused, and the restore DAG's
trigger-time guards (issue 22 review).

* A run whose logical date is in the past -- a manual trigger with an old date, or Airflow's
  "clear" of an old epoch run, which re-runs it with its old data interval -- runs the epoch on
  that run's clock (``run_clock``). It is refused before anything is triggered, and nothing is
  committed twice: the chain only moves forward.
* ``epochal_restore`` keeps ``max_active_runs=1``: the job lease lets a run of the same DAG take
  over from another (``state_store.lease_keeper.takeover_rule``), which is safe only while Airflow
  runs one at a time. Two restore runs therefore never wait for approval at once; the second queues.
* Its conf is validated when a run is created (the DAG's params): a timeout that is not above 0 and
  at most a year, or an ``auto_approve`` that is not a boolean, never creates a run.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from epochal_airflow.hooks.store import run_clock

from state_store.core.failures import CheckpointException
from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, latest_metadata, new_clock, small_job

DAGS = Path(__file__).resolve().parents[3] / "dags"


def test_a_past_epoch_run_is_refused_and_commits_nothing_twice(tmp_path: Path) -> None:
    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    starts = []
    for _ in range(3):
        clock.advance(STEP_MS)
        starts.append(clock.now_ms())
        cycle(job, uri, clock)
    rows, latest = committed_rows(uri, job), latest_metadata(uri, job).checkpoint_id
    # the first epoch's run, cleared (or a manual trigger with its logical date)
    first = datetime.fromtimestamp(starts[0] / 1000, tz=UTC)
    with pytest.raises(CheckpointException) as refused:
        cycle(job, uri, run_clock({"data_interval_end": first}))  # type: ignore[typeddict-item]
    assert "before checkpoint 3 completed" in str(refused.value) and "\n" not in str(refused.value)
    assert "older logical date was cleared or triggered" in str(refused.value)  # the cause, and its remedy
    assert "epochal_backfill" in str(refused.value)
    assert committed_rows(uri, job) == rows and len(set(rows)) == len(rows)
    assert latest_metadata(uri, job).checkpoint_id == latest


@pytest.fixture
def restore_dag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("EPOCHAL_STORE_URI", "s3://nowhere/x?endpoint_url=http://127.0.0.1:9")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS)).dags["epochal_restore"]


def test_restore_runs_never_overlap(restore_dag: Any) -> None:
    assert restore_dag.max_active_runs == 1


@pytest.mark.parametrize(
    "conf",
    [
        {"approval_timeout_minutes": -5},
        {"approval_timeout_minutes": 0},
        {"approval_timeout_minutes": 1e12},
        {"auto_approve": "false"},
        {"dry_run": "no"},
    ],
)
def test_bad_restore_conf_never_creates_a_run(restore_dag: Any, conf: dict[str, Any]) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(restore_dag.params)
    with pytest.raises(ParamValidationError):  # what DAG run creation does with the conf
        params.update(conf)
        params.validate()


def test_good_restore_conf_is_accepted(restore_dag: Any) -> None:
    params = copy.deepcopy(restore_dag.params)
    params.update({"approval_timeout_minutes": 0.02, "auto_approve": False, "dry_run": False})
    params.validate()
