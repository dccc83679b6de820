"""Exactly-once end to end: 10 epochs with a crash at each kill point in turn, restarting after
each; committed output and final state equal the fault-free run row for row."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state_store.core import killpoints
from state_store.faults import SimulatedCrash, kill_switch_from_env
from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, final_state, new_clock, small_job

EPOCHS = 10


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, dict]:  # type: ignore[type-arg]
    uri = (tmp_path_factory.mktemp("reference") / "store").as_uri()
    job, clock = small_job(), new_clock()
    for _ in range(EPOCHS):
        clock.advance(STEP_MS)
        assert cycle(job, uri, clock).status == "completed"
    return committed_rows(uri, job), final_state(uri, job)


@pytest.mark.parametrize("point", killpoints.ALL)
def test_crash_at_each_kill_point_then_restart_gives_the_fault_free_output_and_state(
    point: str,
    tmp_path: Path,
    reference: tuple[list, dict],
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    uri = (tmp_path / "store").as_uri()
    job, clock = small_job(), new_clock()
    crashed = 0
    for epoch in range(EPOCHS):
        clock.advance(STEP_MS)
        if epoch == 3:
            monkeypatch.setenv("EPOCHAL_FAULT", f"{point}@4")
        try:
            cycle(job, uri, clock, kill=kill_switch_from_env(os.environ))
        except SimulatedCrash as crash:
            assert crash.point == point
            crashed += 1
            monkeypatch.delenv("EPOCHAL_FAULT")
            cycle(job, uri, clock)  # the restarted process: failover, then the same epoch again
        monkeypatch.delenv("EPOCHAL_FAULT", raising=False)
    assert crashed == 1, f"kill point {point} was never reached"
    rows, state = reference
    assert committed_rows(uri, job) == rows
    assert final_state(uri, job) == state
