"""Issue 18's three reproductions with real CLI processes, one round each (the 50-round runs are
``python -m bench.concurrency``, results in ``bench/results/concurrency.md``): two concurrent runs,
a restore during a run (refused, and waiting with ``--wait``), a damaged latest ``_metadata.json``
(truncated, a field edited, a body re-checksummed to lie). Each round asserts no duplicate or lost
row, no fork, and one-line errors for every loser (``bench.concurrency`` checks them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.concurrency import damaged_metadata, restore_during_run, two_runs

pytestmark = pytest.mark.integration


def test_two_concurrent_runs_commit_once(tmp_path: Path) -> None:
    result = two_runs(0, tmp_path)
    assert result.ok, result.problems
    assert sorted(result.exits) == [0, 1] and len(result.losers) == 1


@pytest.mark.parametrize("index", [0, 1], ids=["refused", "waits"])
def test_a_restore_during_a_run_is_refused_or_waits_and_output_stays_exactly_once(
    index: int, tmp_path: Path
) -> None:
    result = restore_during_run(index, tmp_path)
    assert result.ok, result.problems
    assert result.exits == [1 if index == 0 else 0]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["truncated", "stale_checksum", "lying_body"])
def test_a_damaged_latest_metadata_is_refused_by_run_and_dry_run(index: int, tmp_path: Path) -> None:
    result = damaged_metadata(index, tmp_path)
    assert result.ok, result.problems
    assert result.exits == [1, 1]
