"""Review of issue 19 (a checked property, true before and after): ``EPOCHAL_FAULT`` in the Airflow
worker's environment reaches the subtasks of the ``run_epoch`` task.

Before issue 19 each subtask read the environment itself; since, ``EpochalStoreHook.runtime`` reads
it once and the spec travels in ``EpochPlan.kill`` to every task. A task-side kill point must still
fire inside the task, and only in the run of the checkpoint the spec names.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from epochal_airflow.operators.checkpoint import RunEpochOperator, TriggerCheckpointOperator

from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.testing import SimulatedCrash

JOB = "tests.unit.runtime.support:small_job"


def _context(run_id: str, task_id: str, epoch: int, pulled: dict[str, Any] | None) -> dict[str, Any]:
    end = datetime.fromtimestamp((DEFAULT_START_MS + epoch * 10_000) / 1000, tz=UTC)
    ti = SimpleNamespace(
        dag_id="epochal_review", task_id=task_id, try_number=1, xcom_pull=lambda task_ids: pulled
    )
    return {"ti": ti, "run_id": run_id, "data_interval_end": end, "logical_date": end}


def _epoch(store: str, epoch: int) -> None:
    run_id = f"run-{epoch}"
    trigger = TriggerCheckpointOperator(task_id="trigger_checkpoint", job=JOB, store_uri=store)
    pending = trigger.execute(_context(run_id, "trigger_checkpoint", epoch, None))
    run = RunEpochOperator(task_id="run_epoch", job=JOB, store_uri=store, epoch_executor="local")
    run.execute(_context(run_id, "run_epoch", epoch, pending))


def test_epochal_fault_fires_in_the_subtasks_of_the_airflow_run_epoch_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = (tmp_path / "store").as_uri()
    monkeypatch.setenv("EPOCHAL_FAULT", "after_state_upload@2")
    _epoch(store, 1)  # checkpoint 1: the spec names checkpoint 2, nothing fires
    with pytest.raises(SimulatedCrash, match="after_state_upload") as crash:
        _epoch(store, 2)
    assert crash.value.checkpoint_id == 2
