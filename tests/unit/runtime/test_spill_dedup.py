"""Issue 23 item 1 for deduplication: the seen keys (state with a TTL) of a ``deduplicate`` operator
larger than its 1 MiB budget live on local disk and give the same output and the same live state as
in memory, across rescales 4 -> 2 -> 8, a crash, and backend switches; keys expire on disk as in
memory (a key passes again after ``ttl_ms``), and a full compaction drops the expired ones."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.core.keygroups import KeyGroupRange
from state_store.spill import SpillStore
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash

STEP = 10_000
TTL_MS = 25_000
MAXP = 128
SCALES = [4, 2, 8, 8]
BUDGET_MB = 1


def job_of(parallelism: int, spill: bool, state_dir: Path) -> Job:
    job = Job(
        "dedup",
        parallelism=parallelism,
        max_parallelism=MAXP,
        state_memory_mb=BUDGET_MB if spill else None,
        state_dir=str(state_dir),
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=11, events_per_second=[3_000, 2_000], keys=60_000,
        start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    job.source(source, uid="clicks").key_by("user_id").deduplicate(ttl_ms=TTL_MS, uid="first").sink(
        ParquetSink(), uid="out"
    )
    return job


def run(
    uri: str, modes: list[bool], state_dir: Path, kill: str | None = None
) -> tuple[list[tuple[Any, ...]], dict[str, Any], list[Any]]:
    clock = ManualClock(DEFAULT_START_MS)
    for epoch, spill in enumerate(modes):
        job = job_of(SCALES[epoch], spill, state_dir)
        clock.advance(STEP)
        if kill is not None and epoch == 1:
            with pytest.raises(SimulatedCrash):
                run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    return outcome(uri)


def outcome(uri: str) -> tuple[list[tuple[Any, ...]], dict[str, Any], list[Any]]:
    """(the committed rows as sorted (user, ts) pairs, the latest checkpoint's state digest, its
    tasks of the deduplicate operator)."""
    store = open_store(uri)
    rows = read_committed(store, "dedup", "out")
    out = sorted(zip(rows.column("user_id").to_pylist(), rows.column("_ts").to_pylist()))
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout("dedup"), 1)
    latest = completed.latest()
    assert latest is not None
    tasks = [t for t in latest.metadata.tasks if t.task.uid == "first"]
    return out, state_digest(store, latest.metadata, MAXP), tasks


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    tmp = tmp_path_factory.mktemp("heap")
    return run((tmp / "store").as_uri(), [False] * 4, tmp / "state")


def test_seen_keys_on_disk_equal_seen_keys_in_memory_across_rescales(
    tmp_path: Path, in_memory: tuple[Any, ...]
) -> None:
    out, digest, tasks = run((tmp_path / "store").as_uri(), [True] * 4, tmp_path / "state")
    assert (out, digest) == in_memory[:2]
    users = [u for u, _ in out]
    assert len(users) > len(set(users)) > 30_000  # many keys, and keys that passed again after the TTL
    assert all("spill" in t.snapshot and t.snapshot["spill"]["kinds"] == {"seen": "value"} for t in tasks)
    for task in tasks:
        assert 0 < task.metrics["state_memory_peak_bytes"] <= BUDGET_MB << 20, task.metrics
        assert "heap_fallback" not in task.metrics and "state_in_memory" not in task.metrics


def test_seen_keys_exceed_the_budget_and_survive_a_crash_and_backend_switches(
    tmp_path: Path, in_memory: tuple[Any, ...]
) -> None:
    """Disk, memory (the epoch crashes after its state upload, then retries), disk, disk: at
    parallelism 2 each subtask's seen keys exceed the budget."""
    uri = (tmp_path / "store").as_uri()
    out, digest, _ = run(uri, [True, False, True, True], tmp_path / "state", kill="after_state_upload")
    assert (out, digest) == in_memory[:2]
    clock = ManualClock(DEFAULT_START_MS + 5 * STEP)
    assert run_cycle(job_of(2, True, tmp_path / "state"), uri, clock, executor="local").status == "completed"
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("dedup"), 1)
    latest = completed.latest()
    assert latest is not None
    sizes = [t.metrics["state_on_disk_bytes"] for t in latest.metadata.tasks if t.task.uid == "first"]
    assert len(sizes) == 2 and min(sizes) > BUDGET_MB << 20, sizes


def test_a_full_compaction_drops_the_keys_whose_rows_all_expired(tmp_path: Path) -> None:
    value_type = pa.struct([("rows", pa.string()), ("expires", pa.int64())])
    store = SpillStore(
        tmp_path / "s",
        KeyGroupRange(0, 0),
        memory_budget_bytes=1 << 20,
        key_type=pa.int64(),
        value_type=value_type,
    )
    store.expires_field = "expires"
    keys = pa.array(np.arange(6, dtype=np.int64))
    values = pa.array(
        [{"rows": f"t{k}", "expires": e} for k, e in zip(range(6), [100, 200, None, 300, 50, 250])],
        value_type,
    )
    store.put(np.zeros(6, dtype=np.int32), keys, values)
    store.flush()
    store.put(
        np.zeros(1, dtype=np.int32),
        pa.array([4], pa.int64()),
        pa.array([{"rows": "new", "expires": 999}], value_type),
    )
    store.flush()
    assert store.get(np.zeros(6, dtype=np.int32), keys).field("rows").to_pylist() == [
        "t0", "t1", "t2", "t3", "new", "t5"
    ]  # fmt: skip
    store.now_ms = 200
    store.compact(everything=True)
    assert [batch.column(0).to_pylist() for _, batch in store.items()] == [[2, 3, 4, 5]]
    store.close()


def test_two_actors_running_each_epoch_at_once_on_one_state_dir_commit_it_once(
    tmp_path: Path, in_memory: tuple[Any, ...]
) -> None:
    """Two ``run_cycle`` calls start together for every epoch (rescaled 4 -> 2 -> 8 -> 8), sharing
    the job's ``state_dir`` as two runs on one host do: the lease lets one of them commit the epoch
    and the other aborts (or finds nothing new). Output and live state equal the in-memory run's --
    no row twice, none lost, no local spill file of the loser read by the winner."""
    uri = (tmp_path / "store").as_uri()
    clock_ms = DEFAULT_START_MS
    outcomes: list[list[str]] = []
    for parallelism in SCALES:
        clock_ms += STEP
        outcomes.append(_race(partial(job_of, parallelism, True, tmp_path / "state"), uri, clock_ms))
    refused = ("aborted", "CheckpointException: checkpoint failed (TOO_MANY_CONCURRENT_CHECKPOINTS)")
    assert all(s[-1] == "completed" and s[0].startswith((*refused, "completed")) for s in outcomes), outcomes
    assert any(s[0].startswith(refused) for s in outcomes), outcomes  # they did overlap
    assert outcome(uri)[:2] == in_memory[:2]


def _race(make_job: Callable[[], Job], uri: str, clock_ms: int) -> list[str]:
    """Two threads, each with its own ``make_job()``, released together to run one epoch; their
    statuses or errors, sorted."""
    start = threading.Barrier(2)
    statuses: list[str] = []

    def actor() -> None:
        job = make_job()
        start.wait()
        try:
            statuses.append(str(run_cycle(job, uri, ManualClock(clock_ms), executor="local").status))
        except Exception as error:
            statuses.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=actor) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(statuses)
