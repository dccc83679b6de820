"""A snapshot writes the key groups that changed together (full files and deltas side by side in
one state file of up to ``ROWS_PER_FILE`` rows): the same state as one file per key group, through
delta chains, rebases and rescaling, with a file per subtask and epoch instead of one per key group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.examples.keyed_counts import build_job
from spark_jobs.runtime import state_io
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.runtime.support import final_state

PARALLELISM = [2, 2, 2, 2, 3, 3, 3, 1, 2, 2, 2, 2]  # 12 epochs: deltas, a rebase, rescaling


def run(uri: str) -> tuple[dict[str, Any], list[int]]:
    """Run the epochs; return the final state and, per epoch, the most files one subtask wrote."""
    clock = ManualClock(DEFAULT_START_MS)
    most_files = []
    for parallelism in PARALLELISM:
        job = build_job(keys=4_000, fraction=0.01, max_parallelism=16, parallelism=parallelism)
        clock.advance(10_000)
        report = run_cycle(job, uri, clock)
        assert report.status == "completed" and report.checkpoint_id is not None
        meta = load_completed(open_store(uri), JobLayout(job.job_id), report.checkpoint_id).metadata
        tasks = [t for t in meta.tasks if t.task.uid == "counts"]
        most_files.append(max(int(t.metrics["files_written"]) for t in tasks))
        for task in tasks:
            assert len(task.handles) == len({h.key for h in task.handles})  # each file listed once
    return final_state(uri, job), most_files


def test_key_groups_written_together_restore_to_the_same_state_as_one_file_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    together, files_together = run((tmp_path / "together").as_uri())
    monkeypatch.setattr(state_io, "ROWS_PER_FILE", 1)  # every key group in a file of its own
    apart, files_apart = run((tmp_path / "apart").as_uri())
    assert together == apart
    assert together["counts"], "the state is not empty"
    assert max(files_together) == 1, files_together
    assert min(files_apart) > 1, files_apart


def test_batches_keep_key_groups_whole_and_in_order() -> None:
    def planned(kg: int, rows: int) -> Any:
        return state_io._Planned(kg, {"s": [None] * rows})  # type: ignore[list-item]

    sizes = [(0, 5), (1, 5), (2, 20), (3, 1), (4, 1)]
    original = state_io.ROWS_PER_FILE
    try:
        state_io.ROWS_PER_FILE = 10
        batches = state_io._batches([planned(kg, n) for kg, n in sizes])
    finally:
        state_io.ROWS_PER_FILE = original
    assert [[p.kg for p in batch] for batch in batches] == [[0, 1], [2], [3, 4]]
