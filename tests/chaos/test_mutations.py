"""Each invariant can fail: a deliberately broken variant of the code, injected with monkeypatch,
is caught by the harness (and only the fault-free reference, computed before the patch, is
trusted). Without the patch the same schedule passes (``test_the_schedules_pass_unbroken``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import spark_jobs.runtime.subtask as subtask_module
import state_store.core.cleaner as cleaner_module
import state_store.core.coordinator as coordinator_module
import state_store.core.jobrecord as jobrecord_module
from spark_jobs.chaos.runner import ChaosConfig, ScheduleResult, reference, run_schedule
from spark_jobs.chaos.schedule import FaultEvent, Schedule
from spark_jobs.runtime import cycle
from spark_jobs.sinks.commit_log import COMMIT_KIND, CommitLog
from spark_jobs.sinks.parquet import ParquetTransactionalSink
from state_store.core import documents
from state_store.core.codec import encode_document
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.retention import RetentionInputs

CONFIG = ChaosConfig()


def one_fault(kind: str, tick: int, retry_bias: float = 0.0, seed: int = 7) -> Schedule:
    return Schedule(seed, CONFIG.ticks, (FaultEvent(tick, kind, seed),), retry_bias)


SCHEDULES = {
    "retention": one_fault("s3_latency", 0),
    "sink": one_fault("kill:mid_sink_commit", 0),
    "latest": one_fault("zombie_coordinator", 0),
    "restore": one_fault("kill:after_ack", 1),
    "cleaner": one_fault("kill:after_ack", 0),
    "recovery": one_fault("kill:after_attempt", 0),
    "zombie_holder": one_fault("op_zombie_holder_restore", 1, seed=7),
    "double_trigger": one_fault("op_double_trigger", 1, seed=7),
}


@pytest.fixture(autouse=True)
def _reference_before_any_patch() -> None:
    reference(CONFIG)  # computed (or reused) with the real code


def invariants(result: ScheduleResult) -> set[int]:
    return {v.invariant for v in result.violations}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_the_schedules_pass_unbroken(name: str) -> None:
    result = run_schedule(SCHEDULES[name], CONFIG)
    assert not result.violations, [str(v) for v in result.violations]


def test_retention_that_ignores_references_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cleaner_module.plan_retention

    def ignoring_references(inputs: RetentionInputs) -> Any:
        blind = tuple(dataclasses.replace(f, references=frozenset()) for f in inputs.checkpoints)
        return real(dataclasses.replace(inputs, checkpoints=blind))

    monkeypatch.setattr(cleaner_module, "plan_retention", ignoring_references)
    result = run_schedule(SCHEDULES["retention"], CONFIG)
    assert 4 in invariants(result), result.violations
    assert any("retained checkpoint" in v.message for v in result.violations if v.invariant == 4)


def test_a_sink_commit_that_is_not_idempotent_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink forgets what it committed and appends a new commit entry on every commit call."""

    def appending_commit(self: CommitLog, checkpoint_id: int, records: Any) -> bool:
        entry = self._entry(checkpoint_id, records)
        ids = self.committed_ids()
        fresh = max(ids, default=0) + 1_000 if checkpoint_id in ids else checkpoint_id
        entry = dataclasses.replace(entry, checkpoint_id=fresh)
        self.store.put(self.layout.commit_entry(fresh), encode_document(COMMIT_KIND, entry))
        return True

    monkeypatch.setattr(CommitLog, "commit", appending_commit)
    monkeypatch.setattr(ParquetTransactionalSink, "committed_checkpoint_ids", lambda self: frozenset())
    result = run_schedule(SCHEDULES["sink"], CONFIG)
    assert 1 in invariants(result), result.violations
    assert any("duplicate" in v.message for v in result.violations if v.invariant == 1)


def test_a_latest_pointer_that_can_move_backwards_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blind overwrite instead of the monotonic compare-and-swap: a stale completion (a zombie
    coordinator finishing checkpoint n after n+1 completed) moves LATEST back."""

    def blind_pointer(self: CheckpointCoordinator, completed: Any) -> None:
        from state_store.core.manifests import LatestPointer

        pointer = LatestPointer(
            completed.checkpoint_id,
            completed.generation,
            completed.metadata_key,
            completed.metadata_sha256,
            self.clock.now_ms(),
        )
        self.store.put(self.layout.latest, documents.encode(pointer))

    monkeypatch.setattr(CheckpointCoordinator, "_move_pointer", blind_pointer)
    result = run_schedule(SCHEDULES["latest"], CONFIG)
    assert any("moved backwards" in v.message for v in result.violations if v.invariant == 3), (
        result.violations
    )


def test_a_restore_that_drops_state_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = subtask_module.read_operator_restore

    def dropping(store: Any, metadata: Any, uid: str, key_groups: Any, **options: Any) -> Any:
        if uid == "user-activity":
            return None, {}  # the operator's state silently lost on restore
        return real(store, metadata, uid, key_groups, **options)

    monkeypatch.setattr(subtask_module, "read_operator_restore", dropping)
    result = run_schedule(SCHEDULES["restore"], CONFIG)
    assert 2 in invariants(result), result.violations
    assert any("user-activity" in v.message for v in result.violations if v.invariant == 2)


def test_a_cleaner_that_never_removes_orphans_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cleaner_module.plan_retention

    def keeping_orphans(inputs: RetentionInputs) -> Any:
        kept = tuple(f for f in inputs.checkpoints if f.status not in ("aborted", "orphan"))
        return real(dataclasses.replace(inputs, checkpoints=kept))

    monkeypatch.setattr(cleaner_module, "plan_retention", keeping_orphans)
    result = run_schedule(SCHEDULES["cleaner"], CONFIG)
    assert 5 in invariants(result), result.violations
    assert any("orphan file" in v.message for v in result.violations if v.invariant == 5)


def test_a_coordinator_that_never_recovers_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """No abort of abandoned checkpoints (no failover): after a crash every new run is refused."""
    monkeypatch.setattr(cycle, "abort_abandoned", lambda *a, **k: [])
    monkeypatch.setattr(CheckpointCoordinator, "failover", lambda self: self.recover())
    result = run_schedule(SCHEDULES["recovery"], CONFIG)
    assert 6 in invariants(result), result.violations


def test_without_the_token_check_a_zombie_holder_commits_output_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 18's restore-during-a-run: the restore reads latest, the paused run wakes up as a zombie
    and completes and notifies its epoch, the restore imports what it read. Only the fencing token
    stops the zombie."""
    monkeypatch.setattr(jobrecord_module, "check_token", lambda record, token: None)
    result = run_schedule(SCHEDULES["zombie_holder"], CONFIG)
    assert any("extra/duplicate" in v.message for v in result.violations if v.invariant == 1), (
        result.violations
    )


def test_without_the_base_check_two_checkpoints_of_one_base_commit_output_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two checkpoints continue one base (max_concurrent_checkpoints 2): only the chain's base check
    stops the second from committing the same input again."""
    monkeypatch.setattr(coordinator_module, "continues", lambda head, base: True)
    result = run_schedule(SCHEDULES["double_trigger"], CONFIG)
    assert any("extra/duplicate" in v.message for v in result.violations if v.invariant == 1), (
        result.violations
    )
