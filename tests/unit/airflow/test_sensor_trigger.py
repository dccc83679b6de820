"""The checkpoint sensor and deferrable trigger see completion and abort from storage alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException
from epochal_airflow.sensors.checkpoint import CheckpointSensor
from epochal_airflow.triggers.checkpoint import CheckpointDecidedTrigger

from state_store.core import CheckpointFailureReason
from state_store.storage import LocalObjectStore
from tests.unit.core.helpers import TASKS, make_job


def first_event(trigger: CheckpointDecidedTrigger) -> dict[str, object]:
    async def run() -> dict[str, object]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(run(), 10))


def test_trigger_and_sensor_report_completed_and_aborted_checkpoints(tmp_path: Path) -> None:
    job = make_job(store=LocalObjectStore(tmp_path))
    done = job.cycle()
    aborted = job.coordinator.trigger(list(TASKS)).checkpoint_id
    uri = tmp_path.as_uri()
    sensor = CheckpointSensor(
        task_id="wait", job_id="job", store_uri=uri, checkpoint_id=aborted, poke_interval=0.01
    )
    assert sensor.poke({}) is False
    job.coordinator.abort(aborted, CheckpointFailureReason.CHECKPOINT_EXPIRED, "late")
    assert first_event(CheckpointDecidedTrigger(uri, "job", done, 0.01))["status"] == "completed"
    event = first_event(CheckpointDecidedTrigger(uri, "job", aborted, 0.01))
    assert event["status"] == "aborted" and "CHECKPOINT_EXPIRED" in str(event["reason"])
    with pytest.raises(AirflowException, match="aborted: CHECKPOINT_EXPIRED"):
        sensor.poke({})
    ok = CheckpointSensor(task_id="ok", job_id="job", store_uri=uri, checkpoint_id=done)
    assert ok.poke({}) is True
    classpath, kwargs = CheckpointDecidedTrigger(uri, "job", done, 1).serialize()
    assert classpath.endswith("CheckpointDecidedTrigger") and kwargs["checkpoint_id"] == done


def test_trigger_and_sensor_read_the_one_status_model_completing_waits_unreadable_fails(
    tmp_path: Path,
) -> None:
    from state_store.core import CheckpointStatus, JobLayout
    from state_store.core.history import checkpoint_history

    job = make_job(store=LocalObjectStore(tmp_path))
    done = job.cycle()
    uri = tmp_path.as_uri()
    layout = JobLayout("job")
    # decided COMPLETE, metadata not yet written: the trigger keeps waiting, the sensor says not yet
    metadata = (tmp_path / layout.metadata(done)).read_bytes()
    (tmp_path / layout.metadata(done)).unlink()
    assert [r.status for r in checkpoint_history(LocalObjectStore(tmp_path), "job")] == [
        CheckpointStatus.COMPLETING
    ]
    sensor = CheckpointSensor(task_id="wait", job_id="job", store_uri=uri, checkpoint_id=done)
    assert sensor.poke({}) is False
    (tmp_path / layout.metadata(done)).write_bytes(metadata)
    assert sensor.poke({}) is True
    # a damaged decision: reported as unreadable, never as completed
    (tmp_path / layout.metadata(done)).unlink()
    (tmp_path / layout.decision(done)).write_bytes(b'{"torn')
    event = first_event(CheckpointDecidedTrigger(uri, "job", done, 0.01))
    assert event["status"] == "unreadable" and "decision" in str(event["reason"]).lower()
    with pytest.raises(AirflowException, match="unreadable"):
        sensor.poke({})
