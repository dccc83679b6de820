"""S4: restore time vs the pyarrow read floor of the same files, and the peer's restart time.

The floor reads every state file the checkpoint references from the same store and decodes it
with ``pyarrow.ipc`` (no checksum, no Python objects): no restore can be faster on this machine.
The verified floor adds each file's checksum on one thread: BLAKE3, as the handles name it (and,
for comparison, SHA-256: what format-1 handles needed). Epochal's restore = ``read_operator_restore``
(fetch, size + checksum check, decode, chain merge)
+ opening the window operator on it (its columnar accumulators: ``window_columns``), over every key
group (the whole state, as parallelism 1 would), with the cyclic GC paused as a subtask pauses it;
``heap_restore_s`` is the same restore into the heap backend (what other operators do).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.gen import EventSpec, epoch_events
from spark_jobs.api.job import Job
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.operators.base import OperatorContext
from spark_jobs.runtime.operators.build import OperatorSite, build_operator
from spark_jobs.runtime.operators.window import WindowOperator
from spark_jobs.runtime.state_io import read_operator_restore
from state_store.core import JobLayout, checksums, load_completed
from state_store.core.codec import sha256_hex
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.keygroups import KeyGroupRange
from state_store.core.state import KeyedStateBackend
from state_store.storage import open_store
from state_store.testing import ManualClock


def floor_and_restore(store_uri: str, job: Job, uid: str = "windows", *, heap: bool = True) -> dict[str, Any]:
    """The floor, Epochal's restore (``read_s``: fetch, verify, decode; then the operator's open)
    and, with ``heap``, the same files into the heap backend."""
    store = open_store(store_uri)
    latest = CheckpointCoordinator(store, job.job_id, clock=ManualClock(0)).latest_completed()
    if latest is None:
        raise ValueError(f"job {job.job_id} has no completed checkpoint to restore: run S1 first")
    meta = load_completed(store, JobLayout(job.job_id), latest.checkpoint_id).metadata
    handles = {h.key: h for t in meta.tasks if t.task.uid == uid for h in t.handles}
    began = time.perf_counter()
    rows = 0
    size = 0
    for key in handles:
        data = store.get(key).data
        size += len(data)
        rows += pa.ipc.open_stream(pa.py_buffer(data)).read_all().num_rows
    floor = time.perf_counter() - began
    began = time.perf_counter()
    for key, handle in handles.items():  # the floor of a verified read: the same plus the checksum
        data = store.get(key).data
        if checksums.mismatch(handle.checksum, data) is not None:
            raise ValueError(f"state file {key} does not match its checksum {handle.checksum}")
        pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    verified_floor = time.perf_counter() - began
    began = time.perf_counter()
    for key in handles:  # the same with SHA-256, what a format-1 handle made every restore compute
        data = store.get(key).data
        sha256_hex(data)
        pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    sha256_floor = time.perf_counter() - began
    everything = KeyGroupRange(0, job.max_parallelism - 1)
    began = time.perf_counter()
    with gc_paused():  # as a subtask restores (spark_jobs.runtime.gcpause)
        restored, _ = read_operator_restore(store, meta, uid, everything, int_rows=True)
        read = time.perf_counter() - began
        operator = _window_operator(job, uid)
        ctx = OperatorContext(job.job_id, 0, 1, job.max_parallelism, everything, 0, latest.checkpoint_id + 1)
        operator.open(ctx, restored)
        columnar = operator.cols is not None
    restore = time.perf_counter() - began
    heap_s: dict[str, float] = {}
    if heap:
        began = time.perf_counter()
        with gc_paused():
            restored, _ = read_operator_restore(store, meta, uid, everything)
            backend = KeyedStateBackend(everything, job.max_parallelism)
            if restored is not None:
                backend.restore(restored.keyed, from_checkpoint=restored.checkpoint_id)
        heap_s["heap_restore_s"] = time.perf_counter() - began
    return {
        "checkpoint_id": latest.checkpoint_id,
        "files": len(handles),
        "state_bytes": size,
        "entries": rows,
        "floor_s": floor,
        "verified_floor_s": verified_floor,
        "sha256_floor_s": sha256_floor,
        "algorithms": sorted({h.algorithm for h in handles.values()}),
        "restore_s": restore,
        "restore_columnar": columnar,
        "restore_over_floor": restore / max(floor, 1e-9),
        "read_s": read,
        "open_s": restore - read,
        **heap_s,
    }


def _window_operator(job: Job, uid: str) -> WindowOperator:
    """The job's window operator as a subtask builds it."""
    step = next(s for s in job.graph.steps if s.uid == uid)
    operator = build_operator(step.spec, OperatorSite(uid, "user_id"))
    assert isinstance(operator, WindowOperator)
    return operator


def peer_restart(
    spec: EventSpec,
    spark: Any,
    root: Path,
    checkpoint: Path,
    provider: str,
    *,
    extra: pa.Table | None = None,
    input_dir: Path | None = None,
) -> float:
    """Append one small file (``extra``; by default 1,000 later events of ``spec``) to the query's
    input (``input_dir``, by default ``root/peer-in``) and restart the peer's query on its
    checkpoint: the wall time of that AvailableNow run (query start, state load, one batch, commit)."""
    from bench.engines import run_peer

    input_dir = input_dir or root / "peer-in"
    if extra is None:
        longer = EventSpec(
            spec.events_per_epoch,
            spec.keys,
            spec.epochs + 1,
            spec.partitions,
            spec.ms_per_event,
            spec.jitter_ms,
            spec.seed,
        )
        extra = epoch_events(longer, spec.epochs).slice(0, 1_000)
    pq.write_table(extra, input_dir / f"restart-{provider}.parquet")
    one = EventSpec(extra.num_rows, spec.keys, 1, 1, spec.ms_per_event, spec.jitter_ms, spec.seed)
    work = checkpoint.parent
    began = time.perf_counter()
    run_peer(one, spark, input_dir, work, provider)
    return time.perf_counter() - began
