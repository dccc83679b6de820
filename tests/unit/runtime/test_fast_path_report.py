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
from tests.unit.runtime.test_window_columns import STEP, window_job


def _float_values(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.schema.get_field_index("value")
    return batch.set_column(i, "value", pc.cast(batch.column("value"), pa.float64()))


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


def test_float_sums_name_the_column_once_in_the_log_and_in_every_ack(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        first, second = _window_metrics(tmp_path, window_job(transform=_float_values))
    assert {m.get("heap_fallback") for m in first} == {"column 'value' of type double"}
    restored = "its restored state is not integer columns (an earlier epoch left the fast path)"
    assert {m.get("heap_fallback") for m in second} == {restored}
    lines = [r.getMessage() for r in caplog.records if "slow path" in r.getMessage()]
    prefix = "window operator 'per-user' keeps its state on the heap backend (the slow path): "
    assert lines == [prefix + "column 'value' of type double", prefix + restored]  # once each


def test_a_shape_the_columns_do_not_cover_is_reported_from_the_first_epoch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=window.__name__):
        (metrics,) = _window_metrics(tmp_path, window_job(assigner=EventTimeSessionWindows(3_000)), epochs=1)
    assert {m.get("heap_fallback") for m in metrics} == {"session windows"}
    assert caplog.text.count("slow path") == 1
