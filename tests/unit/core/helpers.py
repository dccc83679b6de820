"""Shared builders for protocol tests: an in-memory job with a manual clock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from state_store.core import (
    AckRecord,
    CheckpointConfig,
    CheckpointCoordinator,
    DeclineRecord,
    KillSwitch,
    ObjectStore,
    StateHandle,
    TaskCheckpointResponder,
    TaskId,
)
from state_store.core.ports import NO_KILL
from state_store.storage import MemoryObjectStore
from state_store.testing import ManualClock

TASKS = (TaskId("counter", 0), TaskId("counter", 1), TaskId("sink", 0))


@dataclass
class Job:
    store: ObjectStore
    clock: ManualClock
    coordinator: CheckpointCoordinator
    responder: TaskCheckpointResponder
    job_id: str = "job"

    def new_coordinator(self, kill: KillSwitch = NO_KILL, **kw: object) -> CheckpointCoordinator:
        """A second coordinator process over the same storage (or one after a crash)."""
        return CheckpointCoordinator(
            self.store, self.job_id, clock=self.clock, config=self.coordinator.config, kill=kill, **kw
        )  # type: ignore[arg-type]

    def ack(
        self,
        n: int,
        task: TaskId,
        *,
        attempt: int = 1,
        generation: int | None = None,
        payload: bytes | None = None,
        responder: TaskCheckpointResponder | None = None,
    ) -> AckRecord:
        """Upload a state file for ``task`` and write its ack."""
        gen = self.coordinator.pending_record(n).generation if generation is None else generation
        responder = responder or self.responder
        data = payload if payload is not None else f"{task}@{n}".encode()
        handle = responder.upload_state(n, task.uid, task.subtask, task.subtask, data, fmt="bin")
        ack = AckRecord(n, task, gen, attempt, (handle,), metrics={"records": 1})
        responder.acknowledge(ack)
        return ack

    def ack_all(self, n: int, tasks: Sequence[TaskId] = TASKS, **kw: object) -> None:
        for task in tasks:
            self.ack(n, task, **kw)  # type: ignore[arg-type]

    def decline(self, n: int, task: TaskId, attempt: int = 1) -> None:
        gen = self.coordinator.pending_record(n).generation
        self.responder.decline(
            DeclineRecord(n, task, gen, attempt, "TASK_CHECKPOINT_FAILURE", "disk on fire")
        )

    def cycle(self, tasks: Sequence[TaskId] = TASKS) -> int:
        """trigger -> attempt -> ack all -> complete; return the completed id."""
        n = self.coordinator.trigger(list(tasks)).checkpoint_id
        self.coordinator.start_attempt(n)
        self.ack_all(n, tasks)
        result = self.coordinator.complete(n)
        assert result.status == "completed", result
        return n


def handle_of(job: Job, key: str) -> StateHandle:
    data = job.store.get(key).data
    from state_store.core.checksums import checksum_of

    return StateHandle(key, len(data), checksum_of(data))


def make_job(
    config: CheckpointConfig | None = None, *, kill: KillSwitch = NO_KILL, store: ObjectStore | None = None
) -> Job:
    clock = ManualClock()
    store = store or MemoryObjectStore(f"t-{uuid.uuid4().hex}", now_ms=clock.now_ms)
    config = config or CheckpointConfig(timeout_ms=60_000, retained_checkpoints=2, orphan_grace_ms=1000)
    coordinator = CheckpointCoordinator(store, "job", clock=clock, config=config, kill=kill)
    responder = TaskCheckpointResponder(store, "job", kill=kill)
    return Job(store, clock, coordinator, responder)
