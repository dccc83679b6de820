"""The workload matrix (``bench.matrix``): its cells, its inputs and its result checks (fast; no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import matrix as M
from bench.__main__ import main
from bench.gen import (
    EventSpec,
    Shape,
    epoch_events,
    partition_names,
    shaped_events,
    shaped_source,
    write_shaped_inputs,
)
from spark_jobs.api import windows
from state_store.storage import open_store

SPEC = EventSpec(2_000, 50, 3)


# -- the cells -------------------------------------------------------------------------------------
def test_the_cells_cover_every_dimension_against_the_baseline() -> None:
    cells = M.CELLS
    assert 10 <= len(cells) <= 14
    assert len({c.name for c in cells}) == len(cells)
    base = cells[0]
    assert (base.key_type, base.value_type, base.aggregates, base.window) == (
        "int64",
        "int64",
        ("count", "sum"),
        "tumbling",
    )
    assert {c.key_type for c in cells} == {"int64", "string"}
    assert {c.value_type for c in cells} == {"int64", "float64"}
    assert {a for c in cells for a in c.aggregates} == set(M.AGGREGATES)
    assert {c.window for c in cells} == {"tumbling", "sliding", "session", "dedup"}
    assert any(c.lateness_ms == M.LATENESS_MS for c in cells)
    assert any(c.lag_ms > 0 for c in cells)
    assert {c.varies for c in cells} >= set(M.DIMENSIONS)
    # one dimension at a time: a single-dimension cell differs from the baseline in that one only
    fields = {
        "key type": ("key_type",),
        "value type": ("value_type",),
        "aggregates": ("aggregates",),
        "window": ("window",),
        "lateness": ("lateness_ms",),
        "partition skew": ("lag_ms",),
        "operator": ("window", "aggregates"),
    }
    for cell in cells:
        if cell.varies in fields:
            names = ("key_type", "value_type", "aggregates", "window", "lateness_ms", "lag_ms")
            changed = {f for f in names if getattr(cell, f) != getattr(base, f)}
            assert changed and changed <= set(fields[cell.varies]), cell.name
    crossed = [c for c in cells if c.key_type == "string" and c.value_type == "float64"]
    assert any(c.aggregates == ("min", "max") for c in crossed)


def test_targets_and_peers_per_cell() -> None:
    for cell in M.CELLS:
        assert cell.targets == (M.OTHER_TARGETS if cell.window == "dedup" else M.WINDOW_TARGETS)
        # Spark's first/last depend on the arrival order after a shuffle: no peer for them
        assert cell.peer == ("first" not in cell.aggregates and "last" not in cell.aggregates)
    assert M.WINDOW_TARGETS == (3.0, 5.0) and M.OTHER_TARGETS == (1.5, 2.5)


def test_avg_cell_is_skipped_while_avg_does_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    avg = next(c for c in M.CELLS if "avg" in c.aggregates)
    monkeypatch.delattr(windows, "Avg", raising=False)
    assert "Avg does not exist" in (M.skipped_reason(avg) or "")
    assert M.skipped_reason(M.CELLS[0]) is None


def test_unknown_cells_are_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="unknown matrix cells"):
        M.select_cells(["baseline", "nope"])
    assert [c.name for c in M.select_cells(["session", "baseline"])] == ["session", "baseline"]
    assert main(["matrix", "--cells", "nope"]) == 2
    assert "unknown matrix cells ['nope']" in capsys.readouterr().err


def test_every_cell_builds_an_epochal_job(tmp_path: Path) -> None:
    for cell in M.CELLS:
        if M.skipped_reason(cell) is None:
            job = M.build_job(cell, SPEC, (tmp_path / "store").as_uri(), f"job-{cell.name}")
            assert job.job_id == f"job-{cell.name}"


# -- the inputs ------------------------------------------------------------------------------------
def test_string_keys_and_float_values_are_deterministic_and_follow_the_int_records() -> None:
    shape = Shape("string", "float64")
    a, b = shaped_events(SPEC, shape, 1), shaped_events(SPEC, shape, 1)
    assert a.equals(b)
    assert not a.equals(shaped_events(SPEC, shape, 2))
    ints = epoch_events(SPEC, 1)
    assert a.column("user_id").to_pylist() == [f"user-{n}" for n in ints.column("user_id").to_pylist()]
    values = ints.column("value").to_numpy()
    assert a.column("value").to_numpy().tolist() == (values * 0.01 + 0.001).tolist()
    assert a.column("event_time").equals(ints.column("event_time"))
    assert a.schema == pa.schema(
        [("user_id", pa.string()), ("event_time", pa.int64()), ("value", pa.float64())]
    )
    assert shaped_events(SPEC, Shape(), 1).equals(ints)  # the baseline shape is S1's input


def test_the_lagging_partition_trails_by_the_lag() -> None:
    lagged, plain = shaped_events(SPEC, Shape(lag_ms=3_000), 0), epoch_events(SPEC, 0)
    delta = plain.column("event_time").to_numpy() - lagged.column("event_time").to_numpy()
    assert (delta[0::2] == 0).all() and (delta[1::2] == 3_000).all()


def test_duplicates_are_exact_copies_of_an_earlier_record_of_the_other_partition() -> None:
    table = shaped_events(SPEC, Shape(duplicate_share=0.25), 1)
    assert table.column_names == ["event_id", "user_id", "event_time", "value"]
    ids = table.column("event_id").to_numpy()
    own = np.arange(SPEC.events_per_epoch, 2 * SPEC.events_per_epoch)
    copies = np.nonzero(ids != own)[0]
    assert 0.2 * len(own) / 2 < len(copies) < 0.3 * len(own) / 2
    assert (copies % 2 == 1).all() and (ids[0::2] == own[0::2]).all()
    rows = table.to_pylist()
    for i in copies:
        j = int(ids[i] - own[0])
        assert j % 2 == 0 and 0 < i - j <= 99 and rows[i] == rows[j]
    assert table.equals(shaped_events(SPEC, Shape(duplicate_share=0.25), 1))


def test_both_engines_get_the_same_shaped_records(tmp_path: Path) -> None:
    shape = Shape("string", "float64", lag_ms=1_000)
    store = open_store((tmp_path / "store").as_uri())
    write_shaped_inputs(SPEC, shape, store, tmp_path / "peer")
    source = shaped_source(store, shape)
    for e in range(SPEC.epochs):
        for name in partition_names(SPEC):
            per = SPEC.per_partition
            ours = pa.Table.from_batches(list(source.read(name, e * per, (e + 1) * per)))
            peer = pq.read_table(tmp_path / "peer" / f"epoch-{e:05d}-{name}.parquet")
            assert ours.select(peer.column_names).equals(peer)


# -- comparing results -----------------------------------------------------------------------------
INT64 = pa.int64()


def _windows(rows: list[tuple[Any, ...]], value_type: Any = INT64) -> pa.Table:
    keys, starts, counts, sums = zip(*rows)
    return pa.table(
        {
            "user_id": pa.array(keys),
            "window_start": pa.array(starts, pa.int64()),
            "window_end": pa.array([s + M.WINDOW_MS for s in starts], pa.int64()),
            "count": pa.array(counts, pa.int64()),
            "sum": pa.array(sums, value_type),
        }
    )


KEYS = ["user_id", "window_start"]


def test_comparison_catches_a_changed_row() -> None:
    ours = _windows([("user-1", 0, 1, 10), ("user-2", 0, 2, 20), ("user-1", 10_000, 1, 5)])
    same = M.compare_rows(ours, ours, KEYS)
    assert same["identical"] and same["both"] == 3 and same["mismatched"] == 0
    changed = M.compare_rows(
        ours, _windows([("user-1", 0, 1, 10), ("user-2", 0, 3, 20), ("user-1", 10_000, 1, 5)]), KEYS
    )
    assert changed["mismatched"] == 1 and not changed["identical"]
    rekeyed = M.compare_rows(
        ours, _windows([("user-1", 0, 1, 10), ("user-3", 0, 2, 20), ("user-1", 10_000, 1, 5)]), KEYS
    )
    assert (rekeyed["only_ours"], rekeyed["only_peer"], rekeyed["identical"]) == (1, 1, False)
    twice = M.compare_rows(ours, pa.concat_tables([ours, ours.slice(0, 1)]), KEYS)
    assert twice["duplicates_peer"] == 1 and not twice["identical"]
    assert not M.compare_rows(ours, None, KEYS)["identical"]


def test_comparison_accepts_floats_within_the_tolerance_only() -> None:
    exact = 0.1 + 0.2 + 0.3  # 0.6000000000000001
    other_order = 0.3 + 0.2 + 0.1  # 0.6
    ours = _windows([(1, 0, 3, exact), (2, 0, 1, 0.971)], pa.float64())
    peer = _windows([(1, 0, 3, other_order), (2, 0, 1, 0.971)], pa.float64())
    close = M.compare_rows(ours, peer, KEYS)
    assert exact != other_order and close["identical"] and close["mismatched"] == 0
    assert 0 < close["max_rel_diff"] < M.REL_TOL
    far = M.compare_rows(
        ours, _windows([(1, 0, 3, exact * (1 + 1e-6)), (2, 0, 1, 0.971)], pa.float64()), KEYS
    )
    assert (
        far["mismatched"] == 1
        and not far["identical"]
        and far["max_rel_diff"] == pytest.approx(1e-6, rel=1e-3)
    )
    nan = M.compare_rows(ours, _windows([(1, 0, 3, float("nan")), (2, 0, 1, 0.971)], pa.float64()), KEYS)
    assert nan["mismatched"] == 1
    # ints stay exact even next to float columns
    counted = M.compare_rows(ours, _windows([(1, 0, 4, exact), (2, 0, 1, 0.971)], pa.float64()), KEYS)
    assert counted["mismatched"] == 1


def test_windows_beyond_the_earlier_final_watermark_are_counted_not_compared() -> None:
    ours = _windows([(1, 0, 1, 10), (2, 0, 1, 10)])
    peer = _windows([(1, 0, 1, 10), (2, 0, 1, 10), (3, 10_000, 1, 7)])
    strict = M.compare_rows(ours, peer, KEYS)
    assert strict["only_peer"] == 1 and not strict["identical"]
    result = M.compare_rows(ours, peer, KEYS, horizon=M.WINDOW_MS)
    assert result["identical"] and (result["beyond_horizon_ours"], result["beyond_horizon_peer"]) == (0, 1)


def test_close_horizons_take_the_minimum_over_partitions_for_ours() -> None:
    cell = next(c for c in M.CELLS if c.lag_ms)
    df = M.input_frame(SPEC, cell.shape)
    h = M.close_horizons(SPEC, cell, df)
    per_partition = df.groupby("partition")["event_time"].max()
    assert h["ours"] == per_partition.min() - SPEC.jitter_ms
    assert h["peer"] == per_partition.max() - SPEC.jitter_ms - cell.lag_ms
    assert h["both"] == min(h["ours"], h["peer"]) and abs(h["ours"] - h["peer"]) < SPEC.jitter_ms


def test_touching_sessions_are_counted() -> None:
    df = pd.DataFrame({"user_id": [1, 1, 1, 2, 2], "event_time": [0, 3_000, 9_000, 0, 2_999]})
    assert M.touching_pairs(df, horizon=100_000) == 1
    assert M.touching_pairs(df, horizon=6_000) == 1  # sessions from 0 and 3,000 closed, 9,000 not
    assert M.touching_pairs(df, horizon=5_999) == 0  # the one from 3,000 (end 6,000) is still open


def test_first_and_last_are_checked_against_the_input() -> None:
    spec = EventSpec(50_000, 200_000, 3)  # 15 s of event time: the first window closes
    cell = next(c for c in M.CELLS if "first" in c.aggregates)
    df = M.input_frame(spec, cell.shape)
    watermark = int(df.groupby("partition")["event_time"].max().min()) - spec.jitter_ms - 1
    df["window_start"] = df["event_time"] - df["event_time"] % M.WINDOW_MS
    ref = df.groupby(["user_id", "window_start"])["value"].agg(["min", "max", "count"]).reset_index()
    ref = ref[ref["window_start"] + M.WINDOW_MS - 1 <= watermark]
    assert len(ref) > 100 and (ref["count"] == 1).any()
    ours = pa.table(
        {
            "user_id": pa.array(ref["user_id"], pa.int64()),
            "window_start": pa.array(ref["window_start"], pa.int64()),
            "window_end": pa.array(ref["window_start"] + M.WINDOW_MS, pa.int64()),
            "first": pa.array(ref["min"], pa.int64()),
            "last": pa.array(ref["max"], pa.int64()),
        }
    )
    good = M.check_first_last(ours, spec, cell)
    assert good["identical"] and good["both"] == len(ref) and good["single_record_windows"] > 0
    single = int(np.nonzero((ref["count"] == 1).to_numpy())[0][0])
    firsts = ref["min"].to_numpy().copy()
    firsts[single] += 1
    changed = ours.set_column(3, "first", pa.array(firsts, pa.int64()))
    bad = M.check_first_last(changed, spec, cell)
    assert bad["mismatched"] == 1 and not bad["identical"]
    missing = M.check_first_last(ours.slice(1), spec, cell)
    assert missing["only_reference"] == 1 and not missing["identical"]


# -- the report ------------------------------------------------------------------------------------
def _result(cell: M.Cell, ours: float, hdfs: float, rocksdb: float) -> dict[str, Any]:
    best = {
        "epochal-spark": {"events_per_s": ours},
        "peer-hdfs": {"events_per_s": hdfs},
        "peer-rocksdb": {"events_per_s": rocksdb},
    }
    check = M.compare_rows(_windows([(1, 0, 1, 1)]), _windows([(1, 0, 1, 1)]), KEYS)
    return {
        "cell": {"window": cell.window},
        "name": cell.name,
        "describe": cell.describe(),
        "best": best,
        "ratios": M.evaluate(cell, best),
        "targets": {"peer-hdfs": cell.targets[0], "peer-rocksdb": cell.targets[1]},
        "checks": {"epochal-spark vs peer-hdfs": check, "epochal-spark vs peer-rocksdb": check},
        "identical": True,
        "heap_fallback": {"session windows": 2} if cell.window == "session" else {},
    }


def test_ratios_say_whether_each_target_is_met_and_by_how_much() -> None:
    ratios = M.evaluate(M.CELLS[0], _result(M.CELLS[0], 300.0, 100.0, 50.0)["best"])
    assert ratios["peer-hdfs"]["met"] and ratios["peer-hdfs"]["ratio"] == pytest.approx(3.0)
    rocks = ratios["peer-rocksdb"]
    assert rocks["met"] and rocks["ratio"] == pytest.approx(6.0) and rocks["missed_by"] == 0.0
    slow = M.evaluate(
        M.CELLS[0], {"epochal-spark": {"events_per_s": 150.0}, "peer-hdfs": {"events_per_s": 100.0}}
    )
    assert slow["peer-hdfs"]["share_of_target"] == pytest.approx(0.5)
    assert slow["peer-hdfs"]["missed_by"] == pytest.approx(0.5) and slow["peer-hdfs"]["speedup_needed"] == 2.0


def test_markdown_and_chart_show_every_cell(tmp_path: Path) -> None:
    session = next(c for c in M.CELLS if c.window == "session")
    cells = [_result(M.CELLS[0], 400.0, 100.0, 50.0), _result(session, 100.0, 100.0, 50.0)]
    data = {
        "sizes": {"events": 10, "keys": 2, "epochs": 1, "events_per_key_window": 1.0, "repeat": 1},
        "input": {"partitions": 2, "jitter_ms": 2000, "lag_ms": 3000, "duplicate_share_of_odd_records": 0.25},
        "rel_tol": M.REL_TOL,
        "total_s": 60.0,
        "machine": "test",
        "peer_settings": {"conf": {"spark.sql.shuffle.partitions": "4"}},
        "skipped": {"avg": "no Avg"},
        "cells": cells,
    }
    text = "\n".join(M.markdown(data))
    assert "| baseline |" in text and "| session |" in text and "session windows" in text
    assert "4.00x / 3x: met" in text and "1.00x / 3x: **missed** (33% of it)" in text
    assert "Cells missing a target: session" in text and "`avg`: no Avg" in text
    assert (
        M.chart(cells, tmp_path) == tmp_path / "matrix.png" and (tmp_path / "matrix.png").stat().st_size > 0
    )
