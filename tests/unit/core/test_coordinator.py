"""The checkpoint coordinator, step by step (seeds 001 and 002)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from state_store.core import (
    AckResult,
    CheckpointConfig,
    CheckpointException,
    CheckpointFailureReason,
    CheckpointProperties,
    JobFailedError,
    LatestPointer,
    Outcome,
    TaskId,
    documents,
)
from state_store.testing import KillAt, SimulatedCrash
from tests.unit.core.helpers import TASKS, make_job

CONFIG_CONCURRENT = CheckpointConfig(max_concurrent_checkpoints=5, timeout_ms=60_000)


def latest_id(job) -> int | None:  # type: ignore[no-untyped-def]
    pointer = documents.read_optional(job.store, job.coordinator.layout.latest, LatestPointer)
    return None if pointer is None else pointer.checkpoint_id


# -- trigger pre-checks ---------------------------------------------------------------------------


def test_ids_are_allocated_in_order_starting_at_one() -> None:
    job = make_job()
    assert [job.cycle() for _ in range(3)] == [1, 2, 3]


def test_trigger_refused_when_max_concurrent_checkpoints_pending() -> None:
    job = make_job()
    job.coordinator.trigger(list(TASKS))
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS))
    assert err.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT_CHECKPOINTS
    assert job.coordinator.checkpoint_ids() == [1]


def test_forced_savepoint_bypasses_min_pause_but_not_an_undecided_checkpoint() -> None:
    """A forced trigger skips the pause, but not the concurrency limit: both would continue the
    same base, and only one of them could ever complete (the chain never forks)."""
    job = make_job(CheckpointConfig(min_pause_ms=10_000, timeout_ms=60_000))
    job.cycle()
    record = job.coordinator.trigger(list(TASKS), properties=CheckpointProperties.savepoint_props())
    assert record.checkpoint_id == 2 and record.properties.savepoint  # within the pause
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS), properties=CheckpointProperties.savepoint_props())
    assert err.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT_CHECKPOINTS
    assert "checkpoint(s) 2 of job job still undecided" in str(err.value)


def test_trigger_refused_before_min_pause_elapsed() -> None:
    job = make_job(CheckpointConfig(min_pause_ms=5_000, timeout_ms=60_000))
    job.cycle()
    job.clock.advance(4_999)
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS))
    assert err.value.reason is CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS
    forced = job.coordinator.trigger(list(TASKS), properties=CheckpointProperties.forced_checkpoint())
    assert forced.checkpoint_id == 2
    job.clock.advance(1)
    job.coordinator.abort(2, CheckpointFailureReason.MANUALLY_ABORTED)
    assert job.coordinator.trigger(list(TASKS)).checkpoint_id == 3


def test_trigger_without_new_input_is_skipped_unless_forced() -> None:
    job = make_job()
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS), has_new_input=False)
    assert err.value.reason is CheckpointFailureReason.NO_NEW_INPUT and err.value.reason.pre_flight
    forced = job.coordinator.trigger(
        list(TASKS), has_new_input=False, properties=CheckpointProperties.forced_checkpoint()
    )
    assert forced.checkpoint_id == 1


def test_trigger_refused_when_tasks_cannot_run_or_coordinator_shut_down() -> None:
    job = make_job()
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS), tasks_ready=False)
    assert err.value.reason is CheckpointFailureReason.NOT_ALL_REQUIRED_TASKS_RUNNING
    job.coordinator.shutdown()
    with pytest.raises(CheckpointException) as err:
        job.coordinator.trigger(list(TASKS))
    assert err.value.reason is CheckpointFailureReason.COORDINATOR_SHUTDOWN


def test_expired_pending_checkpoint_is_aborted_before_next_trigger() -> None:
    job = make_job()
    job.coordinator.trigger(list(TASKS))
    job.clock.advance(60_001)
    assert job.coordinator.trigger(list(TASKS)).checkpoint_id == 2
    decision = job.coordinator.decision(1)
    assert decision is not None and decision.reason == "CHECKPOINT_EXPIRED"


def test_job_fails_after_more_than_tolerable_consecutive_failures() -> None:
    job = make_job(CheckpointConfig(tolerable_failures=1, timeout_ms=60_000))
    job.cycle()
    for _ in range(2):
        n = job.coordinator.trigger(list(TASKS)).checkpoint_id
        job.coordinator.start_attempt(n)
        job.decline(n, TASKS[0])
        assert job.coordinator.complete(n).status == "aborted"
    with pytest.raises(JobFailedError, match="tolerable_failures=1"):
        job.coordinator.trigger(list(TASKS))


def test_a_completion_resets_the_consecutive_failure_count() -> None:
    job = make_job(CheckpointConfig(tolerable_failures=1, timeout_ms=60_000))
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.abort(n, CheckpointFailureReason.TASK_CHECKPOINT_FAILURE)
    job.cycle()
    assert job.coordinator.consecutive_failures() == 0


def test_two_coordinators_racing_never_own_the_same_id() -> None:
    job = make_job(CheckpointConfig(max_concurrent_checkpoints=100, timeout_ms=60_000))
    coordinators = [job.new_coordinator() for _ in range(8)]
    barrier = threading.Barrier(8)

    def trigger(i: int) -> int:
        barrier.wait()
        return coordinators[i].trigger(list(TASKS)).checkpoint_id

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(trigger, range(8)))
    assert sorted(ids) == list(range(1, 9))
    owners = {job.coordinator.pending_record(i).owner for i in ids}
    assert len(owners) == 8


# -- acknowledgements ----------------------------------------------------------------------------


def test_ack_classification_success_duplicate_unknown_discarded() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    ack = job.ack(n, TASKS[0])
    assert job.coordinator.acknowledge(ack) is AckResult.DUPLICATE
    fresh = job.ack(n, TASKS[1])
    assert fresh.task == TASKS[1]
    stranger = type(ack)(n, TaskId("ghost", 0), ack.generation, 1, ())
    assert job.coordinator.acknowledge(stranger) is AckResult.UNKNOWN
    job.coordinator.abort(n, CheckpointFailureReason.MANUALLY_ABORTED)
    late = type(ack)(n, TASKS[2], ack.generation, 1, ())
    assert job.coordinator.acknowledge(late) is AckResult.DISCARDED


def test_checkpoint_completes_only_when_every_expected_task_acked() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack(n, TASKS[0])
    job.ack(n, TASKS[1])
    result = job.coordinator.complete(n)
    assert (result.status, result.acked, result.expected) == ("in_progress", 2, 3)
    assert job.store.head(job.coordinator.layout.metadata(n)) is None
    job.ack(n, TASKS[2])
    result = job.coordinator.complete(n)
    assert result.status == "completed" and result.checkpoint is not None
    assert latest_id(job) == n
    assert {t.task for t in result.checkpoint.metadata.tasks} == set(TASKS)


def test_ack_from_previous_generation_is_unknown() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n, generation=0)
    result = job.coordinator.complete(n)
    assert result.status == "in_progress"
    assert set(result.ack_results.values()) == {"unknown"}


def test_acks_of_a_zombie_attempt_are_unknown_after_a_retry_starts() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n, attempt=1)
    assert job.coordinator.start_attempt(n).attempt == 2
    result = job.coordinator.complete(n)
    assert result.status == "in_progress" and set(result.ack_results.values()) == {"unknown"}
    job.ack_all(n, attempt=2)
    result = job.coordinator.complete(n)
    assert result.status == "completed"
    assert result.checkpoint is not None
    assert {t.attempt for t in result.checkpoint.metadata.tasks} == {2}


def test_decline_aborts_the_checkpoint_with_the_task_named() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack(n, TASKS[0])
    job.decline(n, TASKS[1])
    result = job.coordinator.complete(n)
    assert result.status == "aborted" and result.reason is CheckpointFailureReason.CHECKPOINT_DECLINED
    assert "counter/1" in result.message
    assert latest_id(job) is None


def test_missing_acks_past_the_deadline_abort_as_expired() -> None:
    job = make_job()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack(n, TASKS[0])
    job.clock.advance(60_001)
    result = job.coordinator.complete(n)
    assert result.reason is CheckpointFailureReason.CHECKPOINT_EXPIRED
    assert "sink/0" in result.message


def test_state_file_with_wrong_checksum_aborts_the_checkpoint_with_deep_verify() -> None:
    """The opt-in read-back (``deep_verify``) at completion; by default completion reads no state
    file, and the restore or ``epochal validate --deep`` finds such a file (tests/unit/checksums)."""
    job = make_job(CheckpointConfig(timeout_ms=60_000, deep_verify=True))
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    acks = [job.ack(n, t) for t in TASKS]
    key = acks[0].handles[0].key
    job.store.put(key, b"X" * acks[0].handles[0].size)  # same size, other bytes
    result = job.coordinator.complete(n)
    assert result.reason is CheckpointFailureReason.CHECKSUM_MISMATCH
    assert key in result.message and "checksum blake3:" in result.message


def test_failing_validation_gate_aborts_and_leaves_latest_unchanged() -> None:
    job = make_job()
    first = job.cycle()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n)
    result = job.coordinator.complete(n, gate=lambda meta: "expect_column_values_to_not_be_null failed")
    assert result.reason is CheckpointFailureReason.VALIDATION_FAILED
    assert latest_id(job) == first
    assert job.store.head(job.coordinator.layout.metadata(n)) is None


def test_complete_is_idempotent_and_a_decision_is_final() -> None:
    job = make_job()
    n = job.cycle()
    again = job.coordinator.complete(n)
    assert again.status == "completed"
    assert job.coordinator.abort(n, CheckpointFailureReason.MANUALLY_ABORTED).outcome is Outcome.COMPLETE


def test_completion_subsumes_older_pending_checkpoints_but_not_savepoints() -> None:
    job = make_job(CheckpointConfig(max_concurrent_checkpoints=5, timeout_ms=60_000))
    old = job.coordinator.trigger(list(TASKS)).checkpoint_id
    savepoint = job.coordinator.trigger(
        list(TASKS), properties=CheckpointProperties.savepoint_props()
    ).checkpoint_id
    newer = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(newer)
    job.ack_all(newer)
    assert job.coordinator.complete(newer).status == "completed"
    old_decision = job.coordinator.decision(old)
    assert old_decision is not None and old_decision.reason == "CHECKPOINT_SUBSUMED"
    assert job.coordinator.decision(savepoint) is None


def test_completed_savepoint_does_not_move_latest() -> None:
    job = make_job()
    first = job.cycle()
    sp = job.coordinator.trigger(list(TASKS), properties=CheckpointProperties.savepoint_props()).checkpoint_id
    job.coordinator.start_attempt(sp)
    job.ack_all(sp)
    assert job.coordinator.complete(sp).status == "completed"
    assert latest_id(job) == first


def test_restore_bumps_generation_and_fences_the_old_generations_checkpoint() -> None:
    job = make_job()
    first = job.cycle()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n)
    job.new_coordinator().bump_generation(restored_from=first)
    result = job.coordinator.complete(n)
    assert result.reason is CheckpointFailureReason.FENCED_BY_NEWER_GENERATION
    assert latest_id(job) == first
    assert job.coordinator.latest_completed().checkpoint_id == first  # type: ignore[union-attr]


def test_two_checkpoints_from_one_base_never_both_complete_and_latest_never_moves_back() -> None:
    """Concurrent checkpoints of one base (two actors, or max_concurrent_checkpoints > 1): the
    first to commit wins, the other aborts BASE_SUPERSEDED -- also when the winner's commit was
    interrupted after the chain moved (it is rolled forward, never undone)."""
    job = make_job(CONFIG_CONCURRENT)
    older = job.coordinator.trigger(list(TASKS)).checkpoint_id
    newer = job.coordinator.trigger(list(TASKS)).checkpoint_id
    for n in (older, newer):
        job.coordinator.start_attempt(n)
        job.ack_all(n)
    stalled = job.new_coordinator(kill=KillAt("before_metadata", older))
    with pytest.raises(SimulatedCrash):
        stalled.complete(older)  # committed and decided COMPLETE, metadata not yet written
    lost = job.coordinator.complete(newer)
    assert (lost.status, lost.reason) == ("aborted", CheckpointFailureReason.BASE_SUPERSEDED)
    assert (
        f"continues checkpoint None, but the job's latest completed checkpoint is now {older}" in lost.message
    )
    assert job.coordinator.complete(older).status == "completed"  # rolled forward
    assert latest_id(job) == older


def test_a_checkpoint_whose_base_is_still_the_head_completes_after_a_lost_race() -> None:
    job = make_job(CONFIG_CONCURRENT)
    first = job.cycle()
    winner = job.new_coordinator().trigger(list(TASKS)).checkpoint_id  # base: first
    rival = job.coordinator.trigger(list(TASKS)).checkpoint_id  # base: first too (not subsumable)
    for n in (rival, winner):
        job.coordinator.start_attempt(n)
        job.ack_all(n)
    assert job.coordinator.complete(winner).status == "completed"
    assert job.coordinator.complete(rival).reason is CheckpointFailureReason.BASE_SUPERSEDED
    assert job.cycle() == rival + 1 and latest_id(job) == rival + 1
    assert job.coordinator.pending_record(rival + 1).positions["base"] == winner != first


def test_master_hook_state_is_snapshotted_and_restored() -> None:
    class Hook:
        identifier = "offsets-service"

        def __init__(self) -> None:
            self.restored: tuple[int, bytes | None] | None = None

        def trigger_checkpoint(self, checkpoint_id: int, timestamp_ms: int) -> bytes | None:
            return f"external-{checkpoint_id}".encode()

        def restore_checkpoint(self, checkpoint_id: int, state: bytes | None) -> None:
            self.restored = (checkpoint_id, state)

    job = make_job()
    hook = Hook()
    coordinator = job.new_coordinator(master_hooks=[hook])
    job.coordinator = coordinator
    n = job.cycle()
    latest = coordinator.latest_completed()
    assert latest is not None
    coordinator.restore_master_hooks(latest)
    assert hook.restored == (n, f"external-{n}".encode())


def test_failover_aborts_in_flight_checkpoints_without_counting_them_as_failures() -> None:
    job = make_job(CheckpointConfig(tolerable_failures=0, timeout_ms=60_000))
    first = job.cycle()
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n)  # fully acked, but the process dies before deciding
    _, report = job.new_coordinator().failover()
    assert report.chosen == first
    decision = job.coordinator.decision(n)
    assert decision is not None and decision.reason == "JOB_FAILOVER"
    assert job.coordinator.consecutive_failures() == 0
    assert job.cycle() == n + 1


def test_retried_trigger_with_the_same_request_id_returns_the_same_checkpoint() -> None:
    job = make_job()
    first = job.coordinator.trigger(list(TASKS), request_id="manual__2026-11-21")
    again = job.new_coordinator().trigger(list(TASKS), request_id="manual__2026-11-21")
    assert again == first
    with pytest.raises(CheckpointException):
        job.coordinator.trigger(list(TASKS), request_id="another-run")
