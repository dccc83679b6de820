"""The benchmark's shared event generator and window comparison (fast; no Spark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.engines import compare_windows
from bench.gen import EventSpec, epoch_events, file_log_source, partition_names, write_inputs
from state_store.storage import open_store


def test_epochs_are_deterministic_and_distinct() -> None:
    spec = EventSpec(1_000, 50, 3)
    assert epoch_events(spec, 1).equals(epoch_events(spec, 1))
    assert not epoch_events(spec, 0).equals(epoch_events(spec, 1))
    assert epoch_events(spec, 2).column("user_id").to_numpy().max() < 50


def test_no_record_is_later_than_the_jitter_behind_the_max_seen() -> None:
    spec = EventSpec(10_000, 100, 2, jitter_ms=500)
    times = np.concatenate([epoch_events(spec, e).column("event_time").to_numpy() for e in range(2)])
    running_max = np.maximum.accumulate(times)
    assert (running_max - times).max() < 500


def test_both_sides_get_the_same_records_with_the_same_epoch_boundaries(tmp_path: Path) -> None:
    spec = EventSpec(600, 20, 3)
    store = open_store((tmp_path / "store").as_uri())
    write_inputs(spec, store, tmp_path / "peer")
    source = file_log_source(store)
    assert source.end_offsets() == {p: 3 * 300 for p in partition_names(spec)}
    files = sorted((tmp_path / "peer").glob("*.parquet"), key=lambda p: (p.stat().st_mtime, p.name))
    assert [f.name for f in files][:2] == ["epoch-00000-p0.parquet", "epoch-00000-p1.parquet"]
    for e in range(3):
        for name in partition_names(spec):
            ours = pa.Table.from_batches(list(source.read(name, e * 300, (e + 1) * 300)))
            peer = pq.read_table(tmp_path / "peer" / f"epoch-{e:05d}-{name}.parquet")
            assert ours.select(["user_id", "event_time", "value"]).equals(peer)


def test_bad_spec_is_refused_with_the_remedy() -> None:
    with pytest.raises(ValueError, match="multiple of partitions"):
        EventSpec(3, 10, 1, partitions=2)
    with pytest.raises(ValueError, match="keys=0"):
        EventSpec(2, 0, 1)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        epoch_events(EventSpec(2, 1, 2), 2)


def test_window_comparison_finds_a_difference() -> None:
    cols = ["user_id", "window_start", "count", "sum"]
    ours = pa.table({c: pa.array(v, pa.int64()) for c, v in zip(cols, [[1, 2], [0, 0], [3, 4], [10, 20]])})
    same = compare_windows(ours, ours)
    assert same["identical"] and same["both_closed"] == 2
    other = pa.table({c: pa.array(v, pa.int64()) for c, v in zip(cols, [[1, 2], [0, 0], [3, 5], [10, 20]])})
    diff = compare_windows(ours, other)
    assert diff["mismatched"] == 1 and not diff["identical"]
