"""Local recovery (``spark_jobs.runtime.warm``, ``Job(local_recovery=True)``): an epoch that adopts
the previous epoch's live operators gives the same output, the same checkpointed state and the same
incremental checkpoint bytes as one that restores from the store -- for every operator kind (window
on columns and on the heap, sessions, deduplication with expiry and re-admission, per-key and
vectorized process functions with timers) -- and every case that must read the store does: a crash
at every kill point, a rescale, a restore from a savepoint, a checkpoint holding another attempt's
acks, a job whose operators changed, records after the snapshot (unaligned)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import (
    Aggregates,
    Avg,
    Count,
    EventTimeSessionWindows,
    Max,
    SlidingEventTimeWindows,
    Sum,
    TumblingEventTimeWindows,
)
from spark_jobs.chaos.observe import state_digest
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, checkpoint_history, killpoints
from state_store.storage import open_store
from state_store.testing import KillAt, ManualClock, SimulatedCrash
from tests.unit.runtime.test_batch_process import RunningTotals, RunningTotalsPerKey

STEP = 3_000
EPOCHS = 7


def _amount(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.append_column("amount", pc.multiply(pc.cast(b.column("value"), pa.float64()), 0.25))


def _window(assigner: Any, aggregates: Aggregates, lateness: int = 0) -> Callable[[Any], Any]:
    return lambda keyed: keyed.window(assigner, aggregates, uid="op", allowed_lateness_ms=lateness)


SUMS = Aggregates(Count(name="n"), Sum("value", name="total"))
FLOATS = Aggregates(
    Count(name="n"), Sum("amount", name="total"), Avg("amount", name="mean"), Max("value", name="top")
)
KINDS: dict[str, Callable[[Any], Any]] = {
    "tumbling-columns": _window(TumblingEventTimeWindows(2_000), SUMS),
    "sliding-floats": _window(SlidingEventTimeWindows(3_000, 1_000), FLOATS),
    "lateness-heap": _window(TumblingEventTimeWindows(2_000), FLOATS, lateness=1_500),
    "sessions": _window(EventTimeSessionWindows(700), FLOATS),
    "dedup": lambda keyed: keyed.deduplicate(ttl_ms=2_500, uid="op"),
    "dedup-long": lambda keyed: keyed.deduplicate(ttl_ms=9_000, uid="op"),
    "process": lambda keyed: keyed.process(RunningTotalsPerKey(), uid="op"),
    "batch-process": lambda keyed: keyed.process(RunningTotals(), uid="op"),
}


def job_of(
    kind: str, parallelism: int, *, local_recovery: bool, mode: str = "exactly_once", shape: str = "churn"
) -> Job:
    """``churn``: 40 keys, every key touched each epoch; ``sparse``: 4,000 keys, about 2% touched
        per epoch; ``steady``: 300 keys, a quarter touched per epoch (with a long TTL, incremental
        checkpoints write deltas, keys expire and come back); ``trickle``: 9 events per epoch, so most
    key groups are unchanged and reuse their files; ``skewed``: partitions at 120 and 15 events/s
        read in chunks of 40 (unaligned barriers overtake in-flight records)."""
    chunk = 40 if shape == "skewed" else 35
    job = Job(
        f"warm-{kind}", parallelism=parallelism, max_parallelism=16, chunk_size=chunk, mode=mode,
        local_recovery=local_recovery,
    )  # fmt: skip
    rates, keys = {
        "churn": ([30, 20], 40),
        "sparse": ([15, 10], 4_000),
        "steady": ([15, 10], 300),
        "trickle": ([2, 1], 4_000),
        "skewed": ([120, 15], 40),
    }[shape]
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=9, events_per_second=rates, out_of_orderness_ms=[900, 300],
        keys=keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    keyed = job.source(source, uid="clicks", out_of_orderness_ms=900).map(_amount).key_by("user_id")
    KINDS[kind](keyed).sink(ParquetSink(), uid="out")
    return job


def run(
    uri: str,
    kind: str,
    *,
    local_recovery: bool,
    scales: tuple[int, ...] = (2,) * EPOCHS,
    kill: str | None = None,
    kill_epoch: int = 3,
    mode: str = "exactly_once",
    shape: str = "churn",
) -> tuple[list[str], dict[str, Any], int, list[str]]:
    """Output rows, the final state digest, the bytes the state acks wrote, and per epoch how the
    keyed operator's subtasks restored (from ``local_recovery`` in their acks)."""
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    how: list[str] = []
    for epoch, parallelism in enumerate(scales):
        job = job_of(kind, parallelism, local_recovery=local_recovery, mode=mode, shape=shape)
        clock.advance(STEP)
        if kill is not None and epoch == kill_epoch:
            with pytest.raises(SimulatedCrash):
                run_cycle(job, uri, clock, executor="local", kill=KillAt(kill))  # type: ignore[arg-type]
        assert run_cycle(job, uri, clock, executor="local").status in ("completed", "skipped")
        how.append(",".join(sorted(_recovery(uri, job.job_id))))
    store = open_store(uri)
    rows = read_committed(store, job.job_id, "out").to_pylist()
    out = sorted(repr(sorted(r.items())) for r in rows)
    completed, _ = CompletedCheckpointStore.recover(store, JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    written = sum(
        int(t.metrics.get("bytes_written", 0))
        for r in checkpoint_history(store, job.job_id)
        if r.status == "completed"
        for t in _tasks(store, job.job_id, r.checkpoint_id)
        if t.task.uid == "op"
    )
    return out, state_digest(store, latest.metadata, 16), written, how


def _tasks(store: Any, job_id: str, checkpoint_id: int) -> Any:
    from state_store.core.completed import load_completed

    try:
        return load_completed(store, JobLayout(job_id), checkpoint_id).metadata.tasks
    except Exception:  # removed by retention
        return ()


def _recovery(uri: str, job_id: str) -> set[str]:
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return {str(t.metrics.get("local_recovery")) for t in latest.metadata.tasks if t.task.uid == "op"}


@pytest.mark.parametrize("shape", ["churn", "sparse", "steady", "trickle"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_adopted_epochs_equal_restored_ones_for_every_operator_kind(
    tmp_path: Path, kind: str, shape: str
) -> None:
    cold = run((tmp_path / "cold").as_uri(), kind, local_recovery=False, shape=shape)
    hot = run((tmp_path / "warm").as_uri(), kind, local_recovery=True, shape=shape)
    assert hot[0] == cold[0] and hot[0], "the same output"
    assert hot[1] == cold[1], "the same checkpointed state"
    assert hot[2] == cold[2], f"the same incremental bytes ({hot[2]} vs {cold[2]})"
    assert cold[3] == ["None"] * EPOCHS
    assert hot[3][0] == "store" and hot[3][1:] == ["adopted"] * (EPOCHS - 1), hot[3]


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_reads_the_store_and_stays_exactly_once(
    tmp_path: Path, point: str
) -> None:
    cold = run((tmp_path / "cold").as_uri(), "dedup", local_recovery=False, shape="sparse")
    hot = run((tmp_path / "warm").as_uri(), "dedup", local_recovery=True, kill=point, shape="sparse")
    assert hot[:2] == cold[:2]
    # the epoch after the crash: the subtasks that ran again adopted nothing they had not acked into
    # the checkpoint they restore from; later epochs adopt again
    assert hot[3][-1] == "adopted", hot[3]


def test_a_rescale_reads_the_store_then_adopts_again(tmp_path: Path) -> None:
    scales = (2, 2, 3, 3, 3, 1, 1)
    cold = run((tmp_path / "cold").as_uri(), "sessions", local_recovery=False, scales=scales)
    hot = run((tmp_path / "warm").as_uri(), "sessions", local_recovery=True, scales=scales)
    assert hot[:3] == cold[:3]
    assert hot[3] == ["store", "adopted", "store", "adopted", "adopted", "store", "adopted"], hot[3]


def test_unaligned_checkpoints_keep_nothing_that_ran_past_the_barrier(tmp_path: Path) -> None:
    args: dict[str, Any] = {"mode": "unaligned", "shape": "skewed"}
    cold = run((tmp_path / "cold").as_uri(), "process", local_recovery=False, **args)
    hot = run((tmp_path / "warm").as_uri(), "process", local_recovery=True, **args)
    assert hot[:2] == cold[:2]
    store = open_store((tmp_path / "warm").as_uri())
    overtaken = sum(
        int(t.snapshot.get("channel_state", {}).get("rows", 0))
        for r in checkpoint_history(store, "warm-process")
        if r.status == "completed"
        for t in _tasks(store, "warm-process", r.checkpoint_id)
    )
    assert overtaken > 0, "no barrier overtook in-flight records: the case was not exercised"


def test_a_kept_chain_is_refused_when_the_checkpoint_holds_other_acks_or_the_job_changed(
    tmp_path: Path,
) -> None:
    """``warm.refusal``: another checkpoint id, a changed operator list, another attempt's ack."""
    uri = tmp_path.as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    job = job_of("dedup", 1, local_recovery=True)
    for _ in range(2):
        clock.advance(STEP)
        run_cycle(job, uri, clock, executor="local")
    (key,) = [k for k in warm._kept if k.job_id == job.job_id and k.stage == 1]
    kept = warm._kept[key]
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job.job_id), 1)
    latest = completed.latest()
    assert latest is not None
    meta = latest.metadata
    assert warm.refusal(kept, meta, 0, kept.shape) is None
    assert warm.refusal(kept, None, 0, kept.shape) == "the epoch restores from no checkpoint"
    assert "operators changed" in (warm.refusal(kept, meta, 0, [("op", "WindowOperator")]) or "")
    retried = {u: warm.KeptAck(a.attempt + 1, a.handles, a.snapshot) for u, a in kept.acks.items()}
    other = warm.WarmChain(kept.checkpoint_id, kept.ops, retried, kept.snapshots)
    assert "holds another ack of op subtask 0" in (warm.refusal(other, meta, 0, kept.shape) or "")
    older = warm.WarmChain(kept.checkpoint_id - 1, kept.ops, kept.acks, kept.snapshots)
    assert f"restores from checkpoint {meta.checkpoint_id}, not" in (
        warm.refusal(older, meta, 0, kept.shape) or ""
    )


def test_a_restore_to_an_older_checkpoint_reads_the_store(tmp_path: Path) -> None:
    """After a restore (here to checkpoint 2 of 4) the next epoch restores from the restore's import,
    not from what the kept operators snapshotted: it reads the store, then adopts again; the result
    equals the same history without local recovery."""
    from spark_jobs.lifecycle.restore import RestoreRequest, restore

    def history(uri: str, local_recovery: bool) -> tuple[list[str], list[str]]:
        warm.clear()
        clock = ManualClock(DEFAULT_START_MS)
        how = []
        job = job_of("process", 2, local_recovery=local_recovery, shape="steady")
        for epoch in range(7):
            if epoch == 4:
                restore(job, uri, clock, RestoreRequest(source="2"))
            clock.advance(STEP)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            how.append(",".join(sorted(_recovery(uri, job.job_id))))
        rows = read_committed(open_store(uri), job.job_id, "out").to_pylist()
        return sorted(repr(sorted(r.items())) for r in rows), how

    cold, _ = history((tmp_path / "cold").as_uri(), False)
    hot, how = history((tmp_path / "warm").as_uri(), True)
    assert hot == cold and hot
    assert how == ["store", "adopted", "adopted", "adopted", "store", "adopted", "adopted"], how


def test_chains_replaced_evicted_or_cleared_are_disposed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept chain that can no longer be adopted frees its state at once (``Operator.dispose``)."""
    from spark_jobs.runtime.operators.base import Operator
    from state_store.core.keygroups import KeyGroupRange

    disposed: list[int] = []

    class Probe(Operator):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n = n

        def dispose(self) -> None:
            disposed.append(self.n)

    def key(n: int) -> warm.WarmKey:
        return warm.WarmKey("memory://x", "job", 1, n, 2, 16, KeyGroupRange(0, 7))

    def chain(n: int) -> warm.WarmChain:
        return warm.WarmChain(n, [Probe(n)], {}, {})

    warm.clear()
    monkeypatch.setattr(warm, "MAX_KEPT", 3)
    for n in range(3):
        warm.keep(key(n), chain(n))
    warm.keep(key(1), chain(10))  # replaces chain 1
    warm.keep(key(3), chain(3))  # evicts the oldest, chain 0
    assert disposed == [1, 0]
    warm.clear()
    assert sorted(disposed) == [0, 1, 2, 3, 10]
