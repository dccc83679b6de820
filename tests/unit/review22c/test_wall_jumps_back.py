"""Review of issue 22: the wall clock stepping back (NTP) gives no negative duration anywhere --
history, the CLI table, the Checkpoints view rows -- and a refusal that says what happened."""

from __future__ import annotations

import re

from spark_jobs.commands import render
from state_store.clocks import ManualClock
from state_store.core import checkpoint_history
from state_store.core.config import CheckpointConfig
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.failures import CheckpointException
from state_store.core.layout import JobLayout
from state_store.monitoring.rows import Listing, checkpoint_row
from tests.unit.core.helpers import TASKS, make_job

NEGATIVE = re.compile(r"(^|[\s(=])-\d")


class SteppedClock:
    """A wall clock that an NTP step can set back."""

    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now


def _job(logical: object, wall: object, min_pause_ms: int = 0) -> object:
    job = make_job(CheckpointConfig(min_pause_ms=min_pause_ms, timeout_ms=60_000))
    job.clock = logical
    job.coordinator = CheckpointCoordinator(
        job.store, job.job_id, clock=logical, config=job.coordinator.config, wall_clock=wall
    )
    return job


def test_a_wall_clock_stepped_back_mid_epoch_gives_no_negative_duration() -> None:
    wall = SteppedClock(1_800_000_010_000)
    job = _job(ManualClock(1_700_000_000_000), wall)
    job.coordinator.trigger(list(TASKS))
    job.coordinator.start_attempt(1)
    job.ack_all(1)
    wall.now -= 5_000  # NTP stepped the clock back 5 s while the epoch ran
    assert str(job.coordinator.complete(1).status) == "completed"
    row = checkpoint_history(job.store, job.job_id)[0]
    assert row.duration_ms is None or row.duration_ms >= 0
    layout = JobLayout(job.job_id)
    docs = {i.key.rsplit("/", 1)[1]: i.version for i in job.store.list(layout.checkpoint_dir(1))}
    view, _ = checkpoint_row(job.store, layout, 1, Listing(docs=docs, acks={1: 3}))
    assert view.duration_ms is None or view.duration_ms >= 0
    table = render.format_history([row], 1)
    assert not NEGATIVE.search(table), table


def test_a_wall_clock_job_whose_clock_stepped_back_is_told_so() -> None:
    clock = SteppedClock(1_800_000_010_000)
    job = _job(clock, clock, min_pause_ms=1_000)
    job.cycle()
    clock.now -= 3_000  # NTP step back on a wall-clock job (one clock, not a mix)
    try:
        job.coordinator.trigger(list(TASKS))
    except CheckpointException as exc:
        text = str(exc)
        assert not NEGATIVE.search(text), text
        assert "went back" in text, text  # not only "run with another clock": that is not what happened
    else:
        raise AssertionError("a trigger before the last completion must wait")
