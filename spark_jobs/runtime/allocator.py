"""Arrow's allocator for subtasks that keep state on disk: jemalloc, unless the operator chose one.

A spill store allocates and frees blocks of a few hundred KB all the time. With Arrow's default
allocator (mimalloc) a process's peak RSS measured 2-5x the store's own accounting
(``tests/unit/disk_state/test_spill_memory.py``: 10.7-12.2 MB above base on a 4 MiB budget with
key groups of 20 MB), with jemalloc 2.2-2.6 MB. Flink's images use jemalloc for the same reason
(fragmentation under RocksDB). So the first store a process opens switches Arrow's default pool to
jemalloc, once, and says so in the log -- unless Arrow's default is not mimalloc (an operator who
set ``ARROW_DEFAULT_MEMORY_POOL=system`` or ``jemalloc`` chose; Arrow read that itself, so this
module reads no environment) or this pyarrow build has no jemalloc. Buffers allocated before keep
their own pool; nothing else changes.
"""

from __future__ import annotations

import logging
import threading

import pyarrow as pa

log = logging.getLogger(__name__)
_lock = threading.Lock()
_chosen = False


def use_jemalloc_for_state_on_disk() -> None:
    """Make jemalloc Arrow's default pool (at most once per process; see the module docstring)."""
    global _chosen
    with _lock:
        if _chosen:
            return
        _chosen = True
        if pa.default_memory_pool().backend_name != "mimalloc":
            return  # the operator chose an allocator (ARROW_DEFAULT_MEMORY_POOL), or this build's default
        try:
            pool = pa.jemalloc_memory_pool()
        except NotImplementedError:
            log.info(
                "state on disk: this pyarrow has no jemalloc; Arrow keeps %s",
                pa.default_memory_pool().backend_name,
            )
            return
        pa.set_memory_pool(pool)
        log.info(
            "state on disk: Arrow now allocates with jemalloc (its peak RSS stays near the state budget;"
            " set ARROW_DEFAULT_MEMORY_POOL=system to keep another allocator)"
        )
