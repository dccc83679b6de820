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
