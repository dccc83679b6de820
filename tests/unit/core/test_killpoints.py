"""Every kill point, then recovery from storage alone: no half-complete checkpoint is ever chosen,
LATEST never moves backwards, and the job goes on completing checkpoints."""

from __future__ import annotations

import pytest

from state_store.core import (
    CheckpointConfig,
    CheckpointCoordinator,
    Outcome,
    TaskCheckpointResponder,
    killpoints,
    load_completed,
)
from state_store.core.cleaner import apply_retention
from state_store.faults import InvalidFaultSpec
from state_store.testing import KillAt, SimulatedCrash
from tests.unit.core.helpers import TASKS, Job, make_job

CORE_POINTS = [
    p for p in killpoints.ALL if p not in (killpoints.AFTER_STATE_UPLOAD, killpoints.MID_SINK_COMMIT)
]


def run_cycle(job: Job, coordinator: CheckpointCoordinator, responder: TaskCheckpointResponder) -> None:
    """One epoch as the DAG runs it: trigger, attempt, acks, complete, retention."""
    pending = [i for i in coordinator.undecided_ids()]
    n = pending[0] if pending else coordinator.trigger(list(TASKS)).checkpoint_id
    attempt = coordinator.start_attempt(n).attempt
    for task in TASKS:
        job.ack(n, task, attempt=attempt, responder=responder)
    coordinator.complete(n)
    apply_retention(job.store, job.job_id, coordinator.config, job.clock, kill=coordinator.kill)
    job.clock.advance(2_000)


def assert_consistent(job: Job, previous_latest: int | None) -> int | None:
    coordinator = job.new_coordinator()
    completed, report = coordinator.recover(deep=True)
    chosen = report.chosen
    if previous_latest is not None:
        assert chosen is not None and chosen >= previous_latest, "LATEST moved backwards"
    for cp in completed:
        load_completed(job.store, coordinator.layout, cp.checkpoint_id, deep=True)
    for n in coordinator.checkpoint_ids():
        decision = coordinator.decision(n)
        has_metadata = job.store.head(coordinator.layout.metadata(n)) is not None
        if has_metadata:
            assert decision is not None and decision.outcome is Outcome.COMPLETE
        if decision is not None and decision.outcome is Outcome.COMPLETE:
            assert has_metadata, f"checkpoint {n} decided COMPLETE was not rolled forward"
    return chosen


@pytest.mark.parametrize("point", CORE_POINTS)
def test_crash_at_kill_point_then_recovery_from_storage_alone(point: str) -> None:
    job = make_job(CheckpointConfig(timeout_ms=60_000, retained_checkpoints=1, orphan_grace_ms=1_000))
    run_cycle(job, job.coordinator, job.responder)
    kill = KillAt(point, 2)
    crashing = job.new_coordinator(kill=kill)
    with pytest.raises(SimulatedCrash):
        run_cycle(job, crashing, TaskCheckpointResponder(job.store, job.job_id, kill=kill))
    assert kill.fired
    latest = assert_consistent(job, 1)
    # the job continues: the crashed epoch is retried (new attempt) or the next one is triggered
    survivor = job.new_coordinator()
    for _ in range(3):
        run_cycle(job, survivor, job.responder)
        latest = assert_consistent(job, latest)
    final = survivor.latest_completed()
    assert final is not None and final.checkpoint_id >= 4
    assert survivor.consecutive_failures() == 0


def test_a_pause_fault_stalls_the_process_once_and_lets_it_go_on() -> None:
    import time

    switch = KillAt("before_decision", 2, mode="pause:0.2")
    started = time.monotonic()
    switch("before_decision", 1)  # another checkpoint: no pause
    switch("before_decision", 2)
    switch("before_decision", 2)  # once only
    assert 0.2 <= time.monotonic() - started < 0.4
    with pytest.raises(InvalidFaultSpec, match="pause:<seconds>"):
        KillAt("before_decision", mode="pause:soon")
