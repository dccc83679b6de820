"""A small job with real checkpoints made by the in-process epoch cycle (no Spark): completed ones,
a failed one, an in-progress one, a validation result, on a clock that ticks so durations are real."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spark_jobs.examples.keyed_counts import build_job
from spark_jobs.runtime.cycle import coordinator_for, run_cycle, trigger_epoch
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core.failures import CheckpointFailureReason
from state_store.storage import open_store
from state_store.validation import CheckResult, ValidationResult, save_result

JOB_ID = "monitored"
STEP_MS = 10_000


class TickingClock:
    """Each read advances ``tick_ms`` (so trigger -> completion takes a few ms), ``advance`` jumps."""

    def __init__(self, start_ms: int, tick_ms: int = 7) -> None:
        self.now, self.tick = start_ms, tick_ms

    def now_ms(self) -> int:
        self.now += self.tick
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass
class Made:
    uri: str
    completed: list[int]
    failed: int
    in_progress: int


def small_job():
    return build_job(JOB_ID, keys=200, fraction=0.1, parallelism=2, max_parallelism=16)


def make_history(root: Path, epochs: int = 3) -> Made:
    """``epochs`` completed checkpoints (run ids ``run-<i>``), then one aborted, then one in flight."""
    uri = f"file://{root}"
    job = small_job()
    clock = TickingClock(DEFAULT_START_MS)
    completed = []
    for i in range(epochs):
        clock.advance(STEP_MS)
        report = run_cycle(job, uri, clock, executor="local", request_id=f"run-{i}")
        assert report.status == "completed", report
        completed.append(report.checkpoint_id)
    store = open_store(uri)
    layout_dir = f"{JOB_ID}/checkpoints/chk-{completed[-1]:010d}/_validation.json"
    save_result(
        store, layout_dir, ValidationResult.of("checkpoint", [CheckResult("keys_unique", True, "ok")])
    )
    clock.advance(STEP_MS)
    failed = trigger_epoch(job, store, clock, request_id="run-failed")
    assert failed is not None
    coordinator_for(job, store, clock).abort(
        failed.checkpoint_id, CheckpointFailureReason.MANUALLY_ABORTED, "by the test"
    )
    clock.advance(STEP_MS)
    pending = trigger_epoch(job, store, clock, request_id="run-pending")
    assert pending is not None
    return Made(uri, completed, failed.checkpoint_id, pending.checkpoint_id)
