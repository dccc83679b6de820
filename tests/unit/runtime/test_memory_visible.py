"""Memory visible (issue 23 item 3): every ack carries the subtask's measured peak resident set
(``spark_jobs.runtime.memory``), ``epochal checkpoints show`` and the Checkpoints view show it per
operator, and the measurement is the subtask's own: an epoch that allocates 160 MB inside a keyed
function reports it; the next epoch, which does not, reports far less (the peak was reset)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spark_jobs.api.functions import KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.cli import main as cli
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.memory import PeakMemory, measured
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.core.state import ValueStateDescriptor
from state_store.monitoring.html import detail_page
from state_store.monitoring.reader import CheckpointStats
from state_store.storage import open_store
from state_store.testing import ManualClock

MB = 1 << 20
HUNGER = {"mb": 0}


class Hungry(KeyedProcessFunction):
    """Counts per key; while ``HUNGER['mb']`` is set, touches that many MB once per chunk."""

    state_descriptors = (ValueStateDescriptor("n"),)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        if HUNGER["mb"]:
            block = np.ones(HUNGER["mb"] * MB // 8)  # resident: every page written
            assert block.sum() > 0
            del block
        state = ctx.state(self.state_descriptors[0])
        state.update((state.value() or 0) + len(rows))


def job() -> Job:
    built = Job("hungry", parallelism=1, max_parallelism=8)
    source = GeneratorSource(uid="clicks", partitions=1, seed=4, events_per_second=20, keys=5)
    built.source(source, uid="clicks").key_by("user_id").process(Hungry(), uid="counts").sink(
        ParquetSink(), uid="out"
    )
    return built


def peaks(uri: str) -> dict[str, tuple[int, str]]:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("hungry"), 1)
    latest = completed.latest()
    assert latest is not None
    return {
        t.task.uid: (int(t.metrics["peak_rss_bytes"]), str(t.metrics["peak_rss_scope"]))
        for t in latest.metadata.tasks
    }


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_each_ack_reports_its_subtasks_peak_and_the_peak_is_reset_per_subtask(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, clock = tmp_path.as_uri(), ManualClock(DEFAULT_START_MS)
    HUNGER["mb"] = 160
    try:
        clock.advance(10_000)
        assert run_cycle(job(), uri, clock, executor="local").status == "completed"
    finally:
        HUNGER["mb"] = 0
    hungry = peaks(uri)
    assert set(hungry) == {"clicks", "counts", "out"} and {s for _, s in hungry.values()} == {"subtask"}
    clock.advance(10_000)
    assert run_cycle(job(), uri, clock, executor="local").status == "completed"
    calm = peaks(uri)
    # the keyed subtask (process function and sink) touched 160 MB in the first epoch only
    assert hungry["counts"][0] - calm["counts"][0] >= 140 * MB, (hungry, calm)
    assert hungry["out"][0] == hungry["counts"][0]  # one subtask, one measurement
    assert abs(hungry["clicks"][0] - calm["clicks"][0]) < 100 * MB  # the source subtask never allocated

    assert cli(["checkpoints", "show", "--job", "hungry", "--store", uri]) == 0
    shown = capsys.readouterr().out
    header = next(line for line in shown.splitlines() if line.startswith("operator"))
    assert "peak memory" in header
    counts = next(line for line in shown.splitlines() if line.startswith("counts"))
    assert re.search(r"\d (MiB|GiB)\s*$", counts), shown  # a measured size, in the peak column

    page = detail_page(CheckpointStats(open_store(uri)).detail("hungry", 2))
    assert "peak memory" in page and "peak rss bytes" in page  # per operator, and per subtask


def test_a_measurement_never_reports_less_than_its_subtasks_own_peak_when_subtasks_overlap() -> None:
    """A second subtask opening while the first runs does not reset the peak under it."""
    first = PeakMemory.start()
    try:
        block = np.ones(120 * MB // 8)
        assert block.sum() > 0
        del block
        with measured() as second:  # opens while the first still runs: no reset
            assert second.scope == first.scope
        own_peak = first.peak_bytes()
        assert own_peak >= 120 * MB
    finally:
        first.stop()
    seen: list[int] = []

    def alone() -> None:
        with measured() as third:  # nothing else runs now: a fresh peak
            seen.append(third.peak_bytes())

    thread = threading.Thread(target=alone)
    thread.start()
    thread.join()
    if first.scope == "subtask":
        assert seen[0] < own_peak - 100 * MB
