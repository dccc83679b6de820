"""The protocol over a store that fails: transient errors, throttling and lost responses on every
operation. Each step is retried as a whole (as Airflow retries a task); the invariants hold."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import pytest

from state_store.core import (
    CheckpointConfig,
    CheckpointCoordinator,
    CompletedCheckpointStore,
    LatestPointer,
    TaskCheckpointResponder,
    TransientStoreError,
    documents,
    load_completed,
)
from state_store.core.cleaner import apply_retention
from state_store.storage import MemoryObjectStore
from state_store.testing import Fault, FaultyObjectStore
from tests.unit.core.helpers import TASKS, Job, make_job

T = TypeVar("T")


def retried(step: Callable[[], T], attempts: int = 50) -> T:
    for _ in range(attempts):
        try:
            return step()
        except TransientStoreError:
            continue
    raise AssertionError("step never succeeded")


def run_epoch(job: Job, faulty: FaultyObjectStore, run_id: str) -> None:
    """One DAG run; every step is a fresh process that may die on a storage error and is retried."""
    config = job.coordinator.config

    def coordinator() -> CheckpointCoordinator:
        return CheckpointCoordinator(faulty, "job", clock=job.clock, config=config)

    n = retried(lambda: coordinator().trigger(list(TASKS), request_id=run_id).checkpoint_id)
    attempt = retried(lambda: coordinator().start_attempt(n).attempt)
    responder = TaskCheckpointResponder(faulty, "job")
    for task in TASKS:
        retried(partial(job.ack, n, task, attempt=attempt, generation=1, responder=responder))
    result = retried(lambda: coordinator().complete(n))
    assert result.status == "completed", result
    retried(lambda: apply_retention(faulty, "job", config, job.clock))


@pytest.mark.parametrize("seed", range(6))
def test_checkpoints_complete_and_stay_consistent_under_lost_responses_and_errors(seed: int) -> None:
    inner = MemoryObjectStore(f"faults-{seed}")
    faulty = FaultyObjectStore(
        inner,
        [
            Fault("lost_response", times=-1, probability=0.08),
            Fault("error", times=-1, probability=0.05),
            Fault("throttle", times=-1, probability=0.05),
        ],
        seed=seed,
    )
    job: Job = make_job(
        CheckpointConfig(timeout_ms=600_000, retained_checkpoints=2, orphan_grace_ms=0), store=faulty
    )
    pointers: list[int] = []
    for epoch in range(8):
        run_epoch(job, faulty, f"scheduled__epoch-{epoch}")
        pointer = documents.read_optional(inner, "job/LATEST", LatestPointer)
        assert pointer is not None
        pointers.append(pointer.checkpoint_id)
        load_completed(inner, job.coordinator.layout, pointer.checkpoint_id, deep=True)
    assert pointers == sorted(pointers) and len(set(pointers)) == 8
    assert len(faulty.injected) > 10, "the faults were not exercised"
    _, report = CompletedCheckpointStore.recover(inner, job.coordinator.layout, 2, deep=True)
    assert report.chosen == pointers[-1]
