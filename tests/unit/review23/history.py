"""A history runner for the local-recovery review: the same script of epochs, crashes, savepoints,
skips and restores is played once without and once with ``Job(local_recovery=True)``; a test
compares the committed output, the final state digest and how each epoch's keyed subtasks restored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from spark_jobs.api.job import Job
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash

STEP = 3_000


@dataclass(frozen=True)
class Epoch:
    """One scripted epoch: ``crashes`` are kill points hit by attempts of the same request before
    it succeeds; ``advance`` the clock step (0: no new input, the epoch is skipped)."""

    crashes: Sequence[str] = ()
    advance: int = STEP
    parallelism: int | None = None
    before: Callable[[Job, str, ManualClock], None] | None = None
    gate: Any = None
    expect: tuple[str, ...] = ("completed", "skipped")


def play(
    uri: str,
    make_job: Callable[..., Job],
    script: Sequence[Epoch],
    *,
    local_recovery: bool,
    sink: str = "out",
    uid: str = "op",
    clear: bool = True,
) -> tuple[list[str], dict[str, Any], list[str]]:
    """Committed rows of ``sink``, the digest of the latest checkpoint, and per epoch how the
    subtasks of ``uid`` restored in the latest checkpoint (``skipped`` for a skipped epoch)."""
    if clear:
        warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    how: list[str] = []
    job = make_job(2, local_recovery=local_recovery)
    for i, epoch in enumerate(script):
        job = make_job(epoch.parallelism or 2, local_recovery=local_recovery)
        clock.advance(epoch.advance)
        if epoch.before is not None:
            epoch.before(job, uri, clock)
        for point in epoch.crashes:
            with pytest.raises(SimulatedCrash):
                run_cycle(job, uri, clock, executor="local", request_id=f"e{i}", kill=KillAt(point))  # type: ignore[arg-type]
        report = run_cycle(
            job, uri, clock, executor="local", request_id=f"e{i}" if epoch.crashes else "", gate=epoch.gate
        )
        assert report.status in epoch.expect, report
        how.append(report.status if report.status != "completed" else recovery(uri, job.job_id, uid))
    store = open_store(uri)
    rows = read_committed(store, job.job_id, sink).to_pylist()
    out = sorted(repr(sorted(r.items())) for r in rows)
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return out, state_digest(store, latest.metadata, job.max_parallelism), how


def recovery(uri: str, job_id: str, uid: str = "op") -> str:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return ",".join(
        sorted({str(t.metrics.get("local_recovery")) for t in latest.metadata.tasks if t.task.uid == uid})
    )
