"""Rescale: a checkpoint taken at parallelism 4 restored with parallelism 2 and 8 -- every key's
state (values, TTL expiries, timers) is identical; afterwards the job keeps counting correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, final_state, new_clock, small_job


@pytest.mark.parametrize("new_parallelism", [2, 8])
def test_state_per_key_is_identical_after_restoring_with_another_parallelism(
    new_parallelism: int, tmp_path: Path
) -> None:
    uri = tmp_path.as_uri()
    clock = new_clock()
    wide = small_job(parallelism=4)
    for _ in range(3):
        clock.advance(STEP_MS)
        assert cycle(wide, uri, clock).status == "completed"
    before = final_state(uri, wide)
    rescaled = small_job(parallelism=new_parallelism)
    report = cycle(rescaled, uri, clock, force=True)  # no new input: a checkpoint of the restored state
    assert report.status == "completed"
    after = final_state(uri, rescaled)
    assert after == before
    assert any(len(rows) > 100 for uid, rows in before.items() if uid != "positions")

    reference_uri = (tmp_path / "reference").as_uri()
    reference_clock = new_clock()
    narrow = small_job(parallelism=4)
    for _ in range(5):
        reference_clock.advance(STEP_MS)
        cycle(narrow, reference_uri, reference_clock)
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(rescaled, uri, clock)
    counts = {r[:5] for r in committed_rows(uri, rescaled)}  # page, window, count, sum (order-free)
    reference_counts = {r[:5] for r in committed_rows(reference_uri, narrow)}
    assert counts == reference_counts
