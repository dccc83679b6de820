"""End to end through a Job: max_parallelism 8 and about 1.5 KB of state per key, so each key group
holds more than the 1 MiB budget (its run is many blocks, cut into files inside the key group);
rescales 4 -> 2 -> 8 and a crash at a kill point give the output and state of the in-memory run, and
every subtask's own accounting of its memory stays within the budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from tests.unit.runtime import spill_epochs
from tests.unit.runtime.spill_epochs import run_epochs
from tests.unit.runtime.test_spill_state import WideTotals

MAXP = 8
SCALES = [4, 2, 8]
STEP = 10_000
BUDGET_MB = 1


def _wide(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``amount`` and a ``trail`` of about 1.5 KB per row: the state of a key is wide."""
    amount = pc.multiply(pc.cast(batch.column("value"), pa.float64()), 0.1)
    trail = pc.binary_repeat(pc.binary_join_element_wise(batch.column("page"), "é|", ""), 150)
    return batch.append_column("amount", amount).append_column("trail", trail)


def _job(parallelism: int, spill: bool, state_dir: Path) -> Job:
    job = Job(
        "blocks", parallelism=parallelism, max_parallelism=MAXP, chunk_size=4_096,
        max_records_per_epoch=1_000_000, state_memory_mb=BUDGET_MB if spill else None,
        state_dir=str(state_dir),
    )  # fmt: skip
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=23, events_per_second=[600, 400], out_of_orderness_ms=[1_500, 500],
        keys=8_000, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=1_500)
        .map(_wide)
        .key_by("user_id")
        .process(WideTotals(), uid="totals")
        .sink(ParquetSink(), uid="out")
    )  # fmt: skip
    return job


def _run(tmp: Path, spill: bool, kill: str | None = None) -> tuple[list[str], dict[str, Any]]:
    uri = (tmp / "store").as_uri()
    run_epochs(lambda p, s: _job(p, s, tmp / "state"), uri, SCALES, [spill] * len(SCALES), STEP, kill)
    return spill_epochs.outcome(uri, "blocks", MAXP)


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    return _run(tmp_path_factory.mktemp("heap"), False)


@pytest.mark.parametrize("kill", [None, "after_state_upload"])
def test_key_groups_larger_than_the_budget_equal_the_in_memory_run(
    tmp_path: Path, kill: str | None, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    assert _run(tmp_path, True, kill) == in_memory
    tasks = spill_epochs.latest_tasks((tmp_path / "store").as_uri(), "blocks", "totals")
    assert len(tasks) == SCALES[-1]
    disk = [t.metrics["state_on_disk_bytes"] for t in tasks]
    assert min(disk) > BUDGET_MB << 20, disk  # at 8 subtasks each holds one key group > the budget
    peaks = [t.metrics["state_memory_peak_bytes"] for t in tasks]
    assert 0 < max(peaks) <= BUDGET_MB << 20, peaks
