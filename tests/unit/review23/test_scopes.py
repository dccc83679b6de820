"""Which process-wide kept chain belongs to which job: one job id in two stores, two job ids in one
store, a two-input stage, and a parallelism that leaves and comes back (2 -> 3 -> 2); and that
chains of a parallelism no longer run are released."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.review23.history import STEP, Epoch, play, recovery
from tests.unit.runtime.test_connect import CountBothInputs, clicks, orders
from tests.unit.runtime.test_local_recovery import job_of

ADOPTED = "adopted"


def _rows(uri: str, job_id: str) -> list[str]:
    rows = read_committed(open_store(uri), job_id, "out").to_pylist()
    return sorted(repr(sorted(r.items())) for r in rows)


def _interleaved(runs: list[tuple[str, Any]], epochs: int) -> list[list[str]]:
    """Epochs of several (store, job factory) pairs interleaved in one process, local recovery on."""
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    how: list[list[str]] = [[] for _ in runs]
    for _ in range(epochs):
        clock.advance(STEP)
        for i, (uri, make) in enumerate(runs):
            job = make()
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            how[i].append(recovery(uri, job.job_id))
    return how


def _alone(uri: str, make: Any, epochs: int) -> list[str]:
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    for _ in range(epochs):
        clock.advance(STEP)
        job = make()
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    return _rows(uri, job.job_id)


def test_one_job_id_in_two_stores_keeps_two_chains(tmp_path: Path) -> None:
    """The same job id, a dedup in one store and a process function in the other (same uid)."""
    a, b = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()

    def dedup() -> Job:
        job = job_of("dedup", 2, local_recovery=True)
        job.job_id = "shared"
        return job

    def process() -> Job:
        job = job_of("process", 2, local_recovery=True)
        job.job_id = "shared"
        return job

    how = _interleaved([(a, dedup), (b, process)], 4)
    assert how == [["store"] + [ADOPTED] * 3] * 2, how
    assert _rows(a, "shared") == _alone((tmp_path / "a1").as_uri(), dedup, 4)
    assert _rows(b, "shared") == _alone((tmp_path / "b1").as_uri(), process, 4)


def test_two_job_ids_in_one_store_keep_their_own_chains(tmp_path: Path) -> None:
    uri = tmp_path.as_uri()
    how = _interleaved(
        [(uri, lambda: job_of("dedup", 2, local_recovery=True)),
         (uri, lambda: job_of("sessions", 2, local_recovery=True))], 4
    )  # fmt: skip
    assert how == [["store"] + [ADOPTED] * 3] * 2, how
    assert _rows(uri, "warm-dedup") == _alone(
        (tmp_path / "d").as_uri(), lambda: job_of("dedup", 2, local_recovery=False), 4
    )
    assert _rows(uri, "warm-sessions") == _alone(
        (tmp_path / "s").as_uri(), lambda: job_of("sessions", 2, local_recovery=False), 4
    )


def test_a_two_input_stage_is_adopted_exactly(tmp_path: Path) -> None:
    def make(parallelism: int, *, local_recovery: bool) -> Job:
        job = Job("joined", parallelism=parallelism, max_parallelism=16, chunk_size=10,
                  local_recovery=local_recovery)  # fmt: skip
        first = job.source(clicks(), uid="clicks", out_of_orderness_ms=1_000).key_by("user_id")
        second = job.source(orders(), uid="orders", out_of_orderness_ms=500).key_by("user_id")
        first.connect(second).process(CountBothInputs(), uid="both").sink(ParquetSink(), uid="out")
        return job

    script = [Epoch() for _ in range(5)]
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False, uid="both")
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True, uid="both")
    assert hot[0] == cold[0] and hot[0] and hot[1] == cold[1]
    assert hot[2] == ["store"] + [ADOPTED] * 4, hot[2]


def test_parallelism_2_3_2_reads_the_store_when_the_range_comes_back(tmp_path: Path) -> None:
    def make(parallelism: int, *, local_recovery: bool) -> Job:
        return job_of("sessions", parallelism, local_recovery=local_recovery)

    script = [Epoch(parallelism=p) for p in (2, 2, 3, 2, 2)]
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False)
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True)
    assert hot[0] == cold[0] and hot[1] == cold[1]
    assert hot[2] == ["store", ADOPTED, "store", "store", ADOPTED], hot[2]


def test_chains_of_a_parallelism_no_longer_run_are_released(tmp_path: Path) -> None:
    """After the rescale to 3 the chains kept at parallelism 2 can never be adopted (the restore is
    a newer checkpoint): they must not stay in memory until the process ends."""
    script = [Epoch(parallelism=p) for p in (2, 2, 3)]
    play(tmp_path.as_uri(), lambda p, **kw: job_of("dedup", p, **kw), script, local_recovery=True)
    widths = {k.width for k in warm._kept if k.job_id == "warm-dedup" and k.stage == 1}
    assert widths == {3}, widths
