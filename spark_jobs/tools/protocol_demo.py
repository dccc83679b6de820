"""The protocol demo: trigger -> tasks snapshot and ack -> complete -> retain, N epochs.

Until the Spark runtime lands, the "tasks" are in-process Python subtasks of a word-count job:
each owns a partition of a deterministic input, keeps per-word counts as keyed state, uploads its
state file at the barrier and acknowledges. The coordinator, layout, manifests, acks and retention
are the real ones, on whatever store the URI names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from state_store.clocks import SystemClock
from state_store.core import (
    AckRecord,
    CheckpointConfig,
    CheckpointCoordinator,
    CheckpointSummary,
    Clock,
    KillSwitch,
    ObjectStore,
    StateHandle,
    TaskCheckpointResponder,
    TaskId,
    apply_retention,
    checkpoint_history,
    killpoints,
)
from state_store.core.ports import NO_KILL

WORDS = ("barrier", "epoch", "state", "savepoint", "spark", "airflow", "flink", "sink")


def word_at(partition: int, offset: int) -> str:
    """The deterministic, replayable input: the word at ``offset`` of ``partition``."""
    return WORDS[((offset * 2654435761 + partition * 40503) % 2**32) % len(WORDS)]


@dataclass
class WordCountSubtask:
    """One subtask: reads partition ``subtask`` of the input, counts words (keyed state)."""

    uid: str
    subtask: int
    counts: dict[str, int] = field(default_factory=dict)
    offset: int = 0

    def process_epoch(self, records: int) -> None:
        """Consume the next ``records`` records of this subtask's partition from ``offset``."""
        for position in range(self.offset, self.offset + records):
            word = word_at(self.subtask, position)
            self.counts[word] = self.counts.get(word, 0) + 1
        self.offset += records

    def snapshot(self) -> bytes:
        return json.dumps({"counts": self.counts, "offset": self.offset}, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        state = json.loads(data)
        self.counts, self.offset = dict(state["counts"]), int(state["offset"])


def run_protocol_demo(
    store: ObjectStore,
    job_id: str = "wordcount",
    *,
    epochs: int = 5,
    parallelism: int = 2,
    records_per_epoch: int = 1000,
    config: CheckpointConfig | None = None,
    clock: Clock | None = None,
    kill: KillSwitch = NO_KILL,
) -> list[CheckpointSummary]:
    """Run ``epochs`` full checkpoint cycles; restore subtasks from the latest checkpoint first."""
    clock = clock or SystemClock()
    config = config or CheckpointConfig(retained_checkpoints=2, orphan_grace_ms=0)
    coordinator = CheckpointCoordinator(store, job_id, clock=clock, config=config, kill=kill)
    responder = TaskCheckpointResponder(store, job_id, kill=kill)
    tasks = [WordCountSubtask("counter", i) for i in range(parallelism)]
    completed, _ = coordinator.failover()
    latest = completed.latest()
    if latest is not None:
        by_task = {t.task: t for t in latest.metadata.tasks}
        for task in tasks:
            handle = by_task[TaskId(task.uid, task.subtask)].handles[0]
            task.restore(store.get(handle.key).data)
    for _ in range(epochs):
        pending = coordinator.trigger(
            [TaskId(t.uid, t.subtask) for t in tasks],
            positions={f"words/{t.subtask}": t.offset + records_per_epoch for t in tasks},
        )
        n = pending.checkpoint_id
        attempt = coordinator.start_attempt(n)
        handles: dict[int, StateHandle] = {}
        for task in tasks:
            task.process_epoch(records_per_epoch)
            handles[task.subtask] = responder.upload_state(
                n, task.uid, task.subtask, task.subtask, task.snapshot(), fmt="json"
            )
        kill(killpoints.AFTER_STATE_UPLOAD, n)
        for task in tasks:
            responder.acknowledge(
                AckRecord(
                    n,
                    TaskId(task.uid, task.subtask),
                    pending.generation,
                    attempt.attempt,
                    (handles[task.subtask],),
                    metrics={"records": records_per_epoch},
                )
            )
        coordinator.complete(n)
        apply_retention(store, job_id, config, clock, kill=kill)
    return checkpoint_history(store, job_id)
