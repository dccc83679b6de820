"""Hypothesis state machine over coordinator operations.

Operations: trigger (by either of two coordinators), start an attempt (a retry), ack, duplicate
ack, zombie ack (old attempt or generation), decline, clock advance (timeouts), complete (by
either coordinator), crash + recover from storage, restore (generation bump) and retention.

Invariants checked after every step:
  * a checkpoint completes iff every expected task acked in its generation and current attempt
    (and no decline, no expiry, no newer generation) -- checked on every ``complete`` result;
  * LATEST never moves backwards and always names a checkpoint that verifies (size + SHA-256);
  * retention never deletes a file referenced by a retained checkpoint or a savepoint.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from state_store.core import (
    CheckpointConfig,
    CheckpointException,
    CheckpointFailureReason,
    CheckpointProperties,
    CompletedCheckpointStore,
    LatestPointer,
    ObjectAlreadyExists,
    Outcome,
    TaskId,
    documents,
    load_completed,
)
from state_store.core.cleaner import apply_retention
from tests.unit.core.helpers import TASKS, Job, make_job

CONFIG = CheckpointConfig(
    max_concurrent_checkpoints=2,
    timeout_ms=5_000,
    tolerable_failures=10_000,
    retained_checkpoints=2,
    orphan_grace_ms=3_000,
)


@dataclass
class Model:
    generation: int
    deadline_ms: int
    savepoint: bool
    attempt: int = 0
    acked: set[TaskId] = field(default_factory=set)
    declined: bool = False
    outcome: str | None = None


class CoordinatorMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.job: Job = make_job(CONFIG)
        self.coordinators = [self.job.coordinator, self.job.new_coordinator()]
        self.models: dict[int, Model] = {}
        self.generation = 1
        self.last_pointer = 0

    # -- helpers ---------------------------------------------------------------------------
    def open_ids(self) -> list[int]:
        return [n for n, m in self.models.items() if m.outcome is None]

    def live(self) -> list[int]:
        return [n for n in self.open_ids() if self.models[n].attempt > 0]

    # -- rules -----------------------------------------------------------------------------
    @rule(who=st.integers(0, 1), savepoint=st.booleans())
    def trigger(self, who: int, savepoint: bool) -> None:
        props = CheckpointProperties.savepoint_props() if savepoint else None
        try:
            record = self.coordinators[who].trigger(list(TASKS), properties=props)
        except CheckpointException as exc:
            assert exc.reason.pre_flight
            return
        assert record.checkpoint_id not in self.models
        self.models[record.checkpoint_id] = Model(record.generation, record.deadline_ms, savepoint)
        self.sync_outcomes()

    @precondition(lambda self: self.open_ids())
    @rule(data=st.data())
    def start_attempt(self, data: st.DataObject) -> None:
        n = data.draw(st.sampled_from(self.open_ids()))
        attempt = self.coordinators[0].start_attempt(n).attempt
        assert attempt == self.models[n].attempt + 1
        self.models[n].attempt = attempt
        self.models[n].acked = set()
        self.models[n].declined = False

    @precondition(lambda self: self.live())
    @rule(data=st.data(), task=st.sampled_from(TASKS))
    def ack(self, data: st.DataObject, task: TaskId) -> None:
        n = data.draw(st.sampled_from(self.live()))
        model = self.models[n]
        try:
            self.job.ack(n, task, attempt=model.attempt)
        except ObjectAlreadyExists:
            raise AssertionError("an identical retried ack must be accepted") from None
        model.acked.add(task)

    @precondition(lambda self: self.live())
    @rule(data=st.data(), task=st.sampled_from(TASKS), old_generation=st.booleans())
    def zombie_ack(self, data: st.DataObject, task: TaskId, old_generation: bool) -> None:
        n = data.draw(st.sampled_from(self.live()))
        model = self.models[n]
        try:
            if old_generation:
                self.job.ack(
                    n, task, attempt=model.attempt, generation=model.generation - 1, payload=b"zombie-g"
                )
            elif model.attempt > 1:
                self.job.ack(n, task, attempt=model.attempt - 1, payload=b"zombie-attempt")
        except ObjectAlreadyExists:
            pass  # the zombie's create-only write is refused: the earlier ack of that attempt stands

    @precondition(lambda self: self.live())
    @rule(data=st.data(), task=st.sampled_from(TASKS))
    def decline(self, data: st.DataObject, task: TaskId) -> None:
        n = data.draw(st.sampled_from(self.live()))
        try:
            self.job.decline(n, task, attempt=self.models[n].attempt)
        except ObjectAlreadyExists:
            pass
        self.models[n].declined = True

    @rule(who=st.integers(0, 1))
    def whole_epoch(self, who: int) -> None:
        """trigger -> attempt -> all acks -> complete, to reach deep histories quickly."""
        self.trigger(who, savepoint=False)
        open_ids = self.open_ids()
        if not open_ids:
            return
        n = max(open_ids)
        self.models[n].attempt = self.coordinators[who].start_attempt(n).attempt
        self.models[n].acked, self.models[n].declined = set(), False
        for task in TASKS:
            self.job.ack(n, task, attempt=self.models[n].attempt)
            self.models[n].acked.add(task)
        self._complete(n, who)

    @rule(ms=st.sampled_from([1, 500, 2_000, 6_000]))
    def advance(self, ms: int) -> None:
        self.job.clock.advance(ms)

    @precondition(lambda self: self.models)
    @rule(data=st.data(), who=st.integers(0, 1))
    def complete(self, data: st.DataObject, who: int) -> None:
        self._complete(data.draw(st.sampled_from(sorted(self.models))), who)

    def _complete(self, n: int, who: int) -> None:
        model = self.models[n]
        now = self.job.clock.now_ms()
        result = self.coordinators[who].complete(n)
        event(f"complete -> {result.status}")
        if model.outcome is not None:
            assert result.status == model.outcome
            return
        if result.status == "completed":
            assert model.acked == set(TASKS), (n, model)
            assert not model.declined and now <= model.deadline_ms and model.generation == self.generation
        elif result.status == "in_progress":
            assert model.acked != set(TASKS) and not model.declined
            assert now <= model.deadline_ms and model.generation == self.generation
        else:
            assert result.reason is not None
            expected_reason = {
                CheckpointFailureReason.CHECKPOINT_DECLINED: model.declined,
                CheckpointFailureReason.CHECKPOINT_EXPIRED: now > model.deadline_ms,
                CheckpointFailureReason.FENCED_BY_NEWER_GENERATION: model.generation != self.generation,
            }
            assert expected_reason.get(result.reason, False), (result, model)
        self.sync_outcomes()

    @rule(who=st.integers(0, 1))
    def crash_and_recover(self, who: int) -> None:
        fresh = self.job.new_coordinator()
        fresh.recover()
        self.coordinators[who] = fresh
        self.sync_outcomes()

    @rule()
    def restore_bumps_generation(self) -> None:
        latest = self.coordinators[0].latest_completed()
        self.coordinators[0].bump_generation(restored_from=latest.checkpoint_id if latest else 0)
        self.generation += 1
        self.last_pointer = 0  # a restore may legitimately re-point LATEST (issue 6)

    @rule()
    def retention(self) -> None:
        referenced = self.protected_references()
        apply_retention(self.job.store, self.job.job_id, CONFIG, self.job.clock)
        for key in referenced:
            assert self.job.store.head(key) is not None, f"retention deleted referenced {key}"
        layout = self.coordinators[0].layout
        for n in [n for n in self.models if self.job.store.head(layout.pending(n)) is None]:
            assert self.models.pop(n).outcome is not None, f"retention removed undecided checkpoint {n}"

    # -- bookkeeping and invariants ----------------------------------------------------------
    def sync_outcomes(self) -> None:
        for n, model in self.models.items():
            decision = self.coordinators[0].decision(n)
            if decision is None:
                continue
            if decision.outcome is Outcome.ABORT:
                model.outcome = "aborted"
            elif self.job.store.head(self.coordinators[0].layout.metadata(n)) is not None:
                model.outcome = "completed"

    def protected_references(self) -> set[str]:
        layout = self.coordinators[0].layout
        completed, _ = CompletedCheckpointStore.recover(self.job.store, layout, CONFIG.retained_checkpoints)
        refs = {h.key for cp in completed for h in cp.metadata.handles}
        for n, model in self.models.items():
            if model.savepoint and model.outcome == "completed":
                refs |= {h.key for h in load_completed(self.job.store, layout, n).metadata.handles}
        return refs

    @invariant()
    def latest_is_monotonic_and_verifies(self) -> None:
        if not hasattr(self, "job"):
            return
        layout = self.coordinators[0].layout
        pointer = documents.read_optional(self.job.store, layout.latest, LatestPointer)
        if pointer is None:
            return
        assert pointer.checkpoint_id >= self.last_pointer, "LATEST moved backwards"
        self.last_pointer = pointer.checkpoint_id
        load_completed(self.job.store, layout, pointer.checkpoint_id, deep=True)


CoordinatorMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoordinatorStateMachine = CoordinatorMachine.TestCase
_ = uuid
