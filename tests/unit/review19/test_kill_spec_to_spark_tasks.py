"""Review of issue 19 (a checked property of the new design): the fault an entry point reads from
``EPOCHAL_FAULT``/``EPOCHAL_FAULT_MODE`` reaches Spark tasks intact. The ``EpochPlan`` a driver
ships (pyspark's cloudpickle) carries the spec; every task arms its own switch from it, which fires
once, only for the checkpoint named, in the mode asked -- as each task's own environment did before.
"""

from __future__ import annotations

import pickle

import pytest
from pyspark import cloudpickle

from spark_jobs.runtime.plan import EpochPlan
from state_store.core import killpoints
from state_store.faults import SimulatedCrash, arm, kill_switch_from_env, task_kill_spec
from tests.unit.runtime.support import small_job


def test_the_kill_spec_survives_the_trip_to_a_spark_task_and_arms_one_switch_per_task() -> None:
    driver = kill_switch_from_env({"EPOCHAL_FAULT": "after_ack@3", "EPOCHAL_FAULT_MODE": "raise"})
    plan = EpochPlan(
        job=small_job(), store_uri="memory://review19", checkpoint_id=3, attempt=1, generation=1,
        trigger_ms=0, savepoint=False, positions={}, restore_id=None, kill=task_kill_spec(driver),
    )  # fmt: skip
    shipped = pickle.loads(cloudpickle.dumps(plan))
    assert shipped.kill == plan.kill and shipped.kill is not None
    assert (shipped.kill.point, shipped.kill.checkpoint_id, shipped.kill.mode) == ("after_ack", 3, "raise")
    for _task in range(2):  # each task (a process before issue 19) fires once, at checkpoint 3 only
        switch = arm(shipped.kill)
        switch(killpoints.AFTER_ACK, 2)
        switch(killpoints.BEFORE_ACK, 3)
        with pytest.raises(SimulatedCrash):
            switch(killpoints.AFTER_ACK, 3)
        switch(killpoints.AFTER_ACK, 3)  # disarmed
    assert task_kill_spec(kill_switch_from_env({})) is None  # no fault: the tasks get none
