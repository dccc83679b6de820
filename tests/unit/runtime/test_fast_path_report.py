"""A window operator that leaves the columnar fast path says so: once per process in the log (which
operator, why) and in every ack's metrics (``heap_fallback``); one on the fast path says nothing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.windows import EventTimeSessionWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators import window
from state_store.clocks import ManualClock
from state_store.core import JobLayout, documents
from state_store.core.manifests import CompletedMetadata
from state_store.storage import open_store
from tests.unit.runtime.support import Collect
from tests.unit.runtime.test_window_columns import STEP, window_job

FLOATS = {"on": False}


def _floats_when_switched_on(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``value`` as floats once the test switches them on (a column whose type changes between
    epochs, as after an upstream schema change)."""
    if not FLOATS["on"]:
        return batch
    i = batch.schema.get_field_index("value")
    return batch.set_column(i, "value", pc.add(pc.cast(batch.column("value"), pa.float64()), 0.25))


def _window_metrics(tmp: Path, job: Any, epochs: int = 2) -> list[list[dict[str, Any]]]:
    """The window operator's ack metrics, per epoch."""
    uri = (tmp / "store").as_uri()
    clock = ManualClock(1_700_000_000_000)
    out = []
    for n in range(1, epochs + 1):
        clock.advance(STEP)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
        meta = documents.read(open_store(uri), JobLayout(job.job_id).metadata(n), CompletedMetadata)
        out.append([t.metrics for t in meta.tasks if t.task.uid == "per-user"])
    return out


@pytest.fixture(autouse=True)
def _fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "_REPORTED", set())


def test_the_fast_path_reports_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        epochs = _window_metrics(tmp_path, window_job())
    assert all(metrics and all("heap_fallback" not in m for m in metrics) for metrics in epochs)
    assert "slow path" not in caplog.text


def test_a_column_that_changes_type_is_named_once_in_the_log_and_in_the_acks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FLOATS, "on", False)
    job = window_job(transform=_floats_when_switched_on)
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        (ints,) = _window_metrics(tmp_path / "ints", job, epochs=1)
        uri = (tmp_path / "mixed").as_uri()
        clock = ManualClock(1_700_000_000_000)
        metrics = []
        for n in range(1, 4):
            monkeypatch.setitem(FLOATS, "on", n >= 2)
            clock.advance(STEP)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            meta = documents.read(open_store(uri), JobLayout(job.job_id).metadata(n), CompletedMetadata)
            metrics.append([t.metrics.get("heap_fallback") for t in meta.tasks if t.task.uid == "per-user"])
    assert all("heap_fallback" not in m for m in ints)
    assert metrics[0] == [None, None]  # int sums: the fast path
    changed = "aggregate columns of type int64/float64 after int64/int64"
    assert set(metrics[1]) == {changed}  # each subtask restored int sums, then met floats
    restored = (
        "its restored state does not have columns (an earlier epoch left the fast path, or two string "
        "keys share a 64-bit hash)"
    )
    assert set(metrics[2]) <= {None, restored}
    lines = [r.getMessage() for r in caplog.records if "slow path" in r.getMessage()]
    prefix = "window operator 'per-user' keeps its state on the heap backend (the slow path): "
    assert lines[0] == prefix + changed and lines.count(prefix + changed) == 1  # once per process
    assert set(lines) <= {prefix + changed, prefix + restored}


def _nulls_in_value(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.schema.get_field_index("value")
    value = batch.column(i)
    return batch.set_column(i, "value", pc.if_else(pc.equal(pc.bit_wise_and(value, 7), 0), None, value))


def test_a_shape_the_columns_do_not_cover_is_reported_from_the_first_epoch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = window_job(assigner=EventTimeSessionWindows(3_000), transform=_nulls_in_value)
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        (metrics,) = _window_metrics(tmp_path, job, epochs=1)
    assert {m.get("heap_fallback") for m in metrics} == {"column 'value' of type int64 with nulls"}
    assert caplog.text.count("slow path") == 1


def test_session_windows_run_on_the_columns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        (metrics,) = _window_metrics(
            tmp_path / "plain", window_job(assigner=EventTimeSessionWindows(3_000)), 1
        )
    assert {m.get("heap_fallback") for m in metrics} == {None}
    assert "slow path" not in caplog.text


def test_deduplication_says_when_it_leaves_the_columns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_jobs.runtime.operators import dedup
    from spark_jobs.runtime.operators.base import OperatorContext
    from state_store.core.keygroups import KeyGroupRange

    monkeypatch.setattr(dedup, "_REPORTED", set())
    with caplog.at_level(logging.WARNING, logger=dedup.__name__):
        for keys in ([1, 2, 2], [1.5, 2.5]):
            op = dedup.DeduplicateOperator("dedup", "k", 1_000)
            op.output = Collect()
            op.open(OperatorContext("job", 0, 1, 8, KeyGroupRange(0, 7), 0, 1), None)
            op.process_batch(pa.record_batch({"k": keys}))
            op.process_batch(pa.record_batch({"k": keys}))
        assert op.metrics()["heap_fallback"] == "keys of type double"
        assert op.metrics()["duplicates_dropped"] == 2 and op.cols is None
    assert caplog.text.count("heap backend") == 1  # the int keys stayed on the columns
