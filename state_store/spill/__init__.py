"""Keyed value state larger than memory: a per-subtask spill store of sorted Arrow runs on local disk.

Design note (issue 23 item 1; numbers in ``bench/results/larger_than_memory.md``)
--------------------------------------------------------------------------------
Two candidates were measured on the issue's workload (value state, 1% of the keys updated per
epoch as one batched lookup + one batched write, 64 MB budget, 2 shared cores):

* RocksDB through ``rocksdict`` 0.3.29 (keys = big-endian u16 key group + key, block cache and
  memtables charged to one budget, WAL off, no compression): at 10M keys about 110K updates/s
  (0.9 s per epoch, almost all of it in ``multi_get`` missing the 32 MB block cache), 57 MB shipped
  per incremental checkpoint on average (an L0->L1 compaction rewrites every SST once the 1% of
  keys spread over all of them: 220 MB in one epoch), and a peak RSS 260 MB above the process
  baseline, four times the budget (native allocations outside the cache's accounting).
* An Arrow spill (this package): about 1.6M updates/s at 10M keys (0.06 s per epoch), 4.3 MB
  shipped per checkpoint on average (12.5 MB in the epoch with a size-tiered merge), restore the
  same (both are file copies), peak RSS during the epochs 27 MB above the baseline.

Chosen: the Arrow spill. Epochs are batches, so a lookup is a sorted merge of a batch of keys with
the runs, one key group at a time (sequential reads of contiguous batches), not 100K independent
point reads; runs are immutable Arrow files like the rest of Epochal's state, so an incremental
checkpoint ships exactly the new runs and a rescale adopts whole files (each run is split into
per-key-group batches); memory is Arrow buffers the store accounts for itself; and there is no
second native storage engine to configure, ship or debug. What RocksDB would do better: point
lookups of a few keys in a huge state (an epoch reads every key group a batch touches), and many
small random updates per epoch; if the workload matrix ever shows that shape, RocksDB remains the
alternative behind the same interface.

Modules: ``runs`` (the run file format), ``store`` (:class:`SpillStore`: buffer, runs, compaction,
batched get/put/delete, key-group iteration, snapshot), ``snapshots`` (:class:`SpillSnapshot`:
the file list and the diff to a base), ``restore`` (adopt, fetch, verify). The runtime's side --
``Job(state_memory_mb=...)``, uploads, restores, the canonical form -- is
``spark_jobs.runtime.spill_state``.
"""

from state_store.spill.restore import Fetch, RestoreStats, restore
from state_store.spill.runs import RunFile, RunFileError
from state_store.spill.snapshots import DamagedRunFileError, SnapshotRun, SpillSnapshot
from state_store.spill.store import SpillStore

__all__ = [
    "DamagedRunFileError",
    "Fetch",
    "RestoreStats",
    "RunFile",
    "RunFileError",
    "SnapshotRun",
    "SpillSnapshot",
    "SpillStore",
    "restore",
]
