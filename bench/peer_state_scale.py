"""S4's peer at scale: the Spark Structured Streaming query restarted on a checkpoint holding the
same window state as ``bench.restore_scale`` builds for Epochal (``users`` x ``windows`` open
count + sum windows).

The peer's state is built the way a user's would be: its query (``bench.engines.run_peer``, the S1
query) runs over one Parquet file per window, every user once per window, two files per
micro-batch, with a watermark delay longer than the input's event time so that no window closes.
Then one small file (1,000 events of existing users, in open windows) is appended and the query is
started again on its checkpoint (``bench.restore.peer_restart``): query start, state load, one
batch, commit. The HDFS-backed provider keeps all state on the driver's JVM heap, so the session
is started with ``spark.driver.memory`` (``PEER_DRIVER_MEMORY``), as a user with large state would.
RocksDB runs first: a driver that runs out of heap on the HDFS-backed provider ends the session.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.engines import WINDOW_MS, run_peer
from bench.gen import EventSpec
from bench.restore import peer_restart

PEER_DRIVER_MEMORY = "16g"
"""Two thirds of this machine's 24 GiB: the HDFS-backed provider counted 2.5 GB of its own memory
for 10M rows of this query (``s4big-10m``), and keeps more than one version of it."""
NO_CLOSE_MS = 24 * 3600 * 1000
"""Watermark delay: a day, far longer than the input's event time, so every window stays open."""


def write_window_inputs(input_dir: Path, users: int, windows: int, seed: int = 11) -> None:
    """One Parquet file per window: every user once, at a time inside that window."""
    input_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    user_ids = np.arange(users, dtype=np.int64)
    for w in range(windows):
        table = pa.table(
            {
                "user_id": user_ids,
                "event_time": w * WINDOW_MS + user_ids % WINDOW_MS,
                "value": rng.integers(1, 1_000, users, dtype=np.int64),
            }
        )
        pq.write_table(table, input_dir / f"window-{w:03d}.parquet")


def restart_extra(users: int) -> pa.Table:
    """The file appended before the restart: 1,000 events of existing users, in window 0."""
    user_ids = np.arange(min(users, 1_000), dtype=np.int64)
    return pa.table(
        {"user_id": user_ids, "event_time": user_ids % WINDOW_MS, "value": np.ones_like(user_ids)}
    )


def _bytes_under(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def build_and_restart(spark: Any, root: Path, users: int, windows: int, provider: str) -> dict[str, Any]:
    """Build the peer's state (``users`` x ``windows`` rows) and time its restart on it. Raises
    RuntimeError when the peer holds another number of state rows (the comparison would be void)."""
    input_dir, work = root / f"in-{provider}", root / f"work-{provider}"
    write_window_inputs(input_dir, users, windows)
    spec = EventSpec(2 * users, users, max(1, windows // 2), partitions=2, jitter_ms=NO_CLOSE_MS)
    began = time.perf_counter()
    built = run_peer(spec, spark, input_dir, work, provider)
    build_s = time.perf_counter() - began
    rows = built["epochs"][-1]["state_rows"] if built["epochs"] else 0
    if rows != users * windows:
        raise RuntimeError(f"peer-{provider} holds {rows:,} state rows, expected {users * windows:,}")
    checkpoint = Path(built["checkpoint_dir"])
    state_bytes = _bytes_under(checkpoint / "state")
    restart_s = peer_restart(
        spec, spark, root, checkpoint, provider, extra=restart_extra(users), input_dir=input_dir
    )
    return {
        "provider": provider,
        "state_rows": rows,
        "state_bytes_on_disk": state_bytes,
        "state_memory_bytes": built["epochs"][-1]["state_memory_bytes"],
        "build_s": build_s,
        "restart_s": restart_s,
    }
