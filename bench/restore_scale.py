"""S4 at the issue's size: restoring about 1 GB of window state vs the pyarrow read floor.

S1's window state is only megabytes (windows fire every epoch), so the state here is built
directly: the window operator's accumulators (``WindowColumns``: count and sum per user and open
10-second window) for ``keys`` users in ``windows`` open windows, split over ``parallelism``
subtasks by key group, written by the real snapshot path (``write_operator_snapshot``: int64
layout, content-addressed files of up to ``ROWS_PER_FILE`` rows) and completed as a real checkpoint
(trigger, acks, ``complete`` with its size checks). Then, as in ``bench.restore``:

* floor: every state file fetched from the same store and read with ``pyarrow.ipc`` (no checksum,
  no Python objects);
* restore: ``read_operator_restore`` (fetch, verify size and BLAKE3, decode; the files of one
  subtask's share, each once) -- split into ``read_s`` and the window operator's ``open`` on it
  (``open_s``: one run per window, in the files' (key group, key) order; the key groups of a
  checkpoint's files are trusted), over every key group (the whole state, as parallelism 1 would restore it).

The key -> key group cache is cleared before the restore: a restarted subtask is a new process.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from bench.engines import build_window_job
from bench.gen import EventSpec
from bench.restore import floor_and_restore
from spark_jobs.runtime import keys as keys_module
from spark_jobs.runtime.operators.base import OperatorSnapshot
from spark_jobs.runtime.operators.window_columns import WindowColumns
from spark_jobs.runtime.state_io import write_operator_snapshot
from state_store.core import JobLayout
from state_store.core.coordinator import CheckpointCoordinator
from state_store.core.keygroups import key_group_range_for_subtask
from state_store.core.manifests import AckRecord, TaskId
from state_store.core.responder import TaskCheckpointResponder
from state_store.core.state.backend import shared_key_group_cache
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot
from state_store.storage import open_store
from state_store.testing import ManualClock

WINDOW_MS = 10_000
UID = "windows"


def build_state(store_uri: str, job_id: str, keys: int, windows: int, parallelism: int = 2) -> dict[str, Any]:
    """Write one completed checkpoint of ``keys`` x ``windows`` window accumulators; return sizes."""
    spec = EventSpec(2, keys, 1)
    job = build_window_job(spec, store_uri, job_id, parallelism=parallelism)
    store = open_store(store_uri)
    layout = JobLayout(job_id)
    clock = ManualClock(1_000_000)
    coordinator = CheckpointCoordinator(store, job_id, clock=clock, max_parallelism=job.max_parallelism)
    tasks = [TaskId(UID, i) for i in range(parallelism)]
    pending = coordinator.trigger(tasks, positions={})
    n = pending.checkpoint_id
    attempt = coordinator.start_attempt(n).attempt
    responder = TaskCheckpointResponder(store, job_id)
    user_ids = np.arange(keys, dtype=np.int64)
    kg_of = keys_module.key_groups(pa.array(user_ids), job.max_parallelism)
    rng = np.random.default_rng(7)
    entries = 0
    written_bytes = 0
    began = time.perf_counter()
    for task in tasks:
        owned = key_group_range_for_subtask(job.max_parallelism, parallelism, task.subtask)
        mine = (kg_of >= owned.first) & (kg_of <= owned.last)
        cols = WindowColumns(2)
        for w in range(windows):
            counts = rng.integers(1, 50, int(mine.sum()))
            partials = np.stack([counts, counts * rng.integers(1, 1000, len(counts))], axis=1)
            cols.merge(w * WINDOW_MS, user_ids[mine], kg_of[mine], partials)
        rows = cols.snapshot_rows()
        entries += sum(len(r) for r in rows.values())
        keyed = KeyedStateSnapshot(
            max_parallelism=job.max_parallelism,
            key_group_range=owned,
            kinds={"acc": StateKind.AGGREGATING},
            key_groups={kg: {"acc": r} for kg, r in rows.items()},
        )
        written = write_operator_snapshot(store, layout, UID, OperatorSnapshot(keyed=keyed), {})
        written_bytes += written.bytes_written
        responder.acknowledge(
            AckRecord(n, task, pending.generation, attempt, tuple(written.handles), snapshot=written.snapshot)
        )
    write_seconds = time.perf_counter() - began
    result = coordinator.complete(n)
    if result.status != "completed":
        raise RuntimeError(f"checkpoint {n} {result.status}: {result.message}")
    return {
        "job": job,
        "entries": entries,
        "bytes_written": written_bytes,
        "write_s": write_seconds,
    }


def run(store_uri: str, keys: int, windows: int, repeat: int = 3) -> dict[str, Any]:
    built = build_state(store_uri, "s4big", keys, windows)
    runs = []
    for _ in range(repeat):
        shared_key_group_cache(built["job"].max_parallelism).clear()
        runs.append(floor_and_restore(store_uri, built["job"], UID, heap=False))
    best = min(runs, key=lambda r: r["restore_s"])
    return {
        "keys": keys,
        "windows": windows,
        "entries": built["entries"],
        "write_s": built["write_s"],
        "runs": runs,
        "best": best,
        "floor_s": min(r["floor_s"] for r in runs),
    }
