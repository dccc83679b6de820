from __future__ import annotations

import pytest

from state_store.monitoring import CheckpointRow, build_overview, percentile, summarize


def row(n: int, status: str, **kw: object) -> CheckpointRow:
    base: dict[str, object] = dict(
        checkpoint_id=n,
        status=status,
        trigger_ms=1000 * n,
        end_ms=1000 * n + 10 * n,
        acked=2,
        expected=2,
        state_size=100 * n,
        incremental_size=10,
        alignment_ms=None,
        savepoint=False,
        generation=1,
        run_id=f"r{n}",
        validation="not_run",
    )
    base.update(kw)
    return CheckpointRow(**base)  # type: ignore[arg-type]


def test_nearest_rank_percentiles_are_values_that_occurred() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7.0], 99) == 7.0
    s = summarize([5, 1, 3, 2, 4])
    assert (s.count, s.min, s.avg, s.p50, s.p99, s.max) == (5, 1, 3.0, 3, 5, 5)
    assert summarize([]).to_json() == {
        "count": 0,
        "min": None,
        "avg": None,
        "p50": None,
        "p99": None,
        "max": None,
    }


def test_percentile_refuses_bad_input_with_the_rule() -> None:
    with pytest.raises(ValueError, match="use 0 < p <= 100"):
        percentile([1.0], 0)
    with pytest.raises(ValueError, match="at least one value"):
        percentile([], 50)


def test_overview_counts_add_up_and_name_the_latest_of_each_kind() -> None:
    rows = [
        row(1, "completed"),
        row(2, "failed", reason="CHECKPOINT_DECLINED: x"),
        row(3, "completed", restored_from="file:///sp"),
        row(4, "completed", savepoint=True),
        row(5, "in_progress", end_ms=None),
    ]
    o = build_overview("j", rows, generation=2)
    assert (o.triggered, o.completed, o.failed, o.in_progress, o.restored) == (5, 3, 1, 1, 1)
    assert o.triggered == o.completed + o.failed + o.in_progress + o.completing + o.unreadable
    assert o.latest_completed is not None and o.latest_completed.checkpoint_id == 3  # 4 is a savepoint
    assert o.latest_savepoint is not None and o.latest_savepoint.checkpoint_id == 4
    assert o.latest_failure is not None and o.latest_failure.reason.startswith("CHECKPOINT_DECLINED")
    assert o.latest_restore is not None and o.latest_restore.restored_from == "file:///sp"
    assert o.highest_id == 5 and o.generation == 2


def test_dag_run_links_point_at_the_dag_that_made_the_checkpoint() -> None:
    from state_store.monitoring.html import dag_run_path

    assert dag_run_path(
        "click-stream", row(1, "completed", run_id="scheduled__2026-01-01T00:00:00+00:00")
    ) == ("/dags/epochal_click_stream/runs/scheduled__2026-01-01T00%3A00%3A00%2B00%3A00")
    assert dag_run_path("j", row(2, "completed", run_id="manual__x", restored_from="file:///sp")) == (
        "/dags/epochal_restore/runs/manual__x"
    )
    assert dag_run_path("j", row(3, "completed", run_id="savepoint-nightly", savepoint=True)) is None
    assert dag_run_path("j", row(4, "completed", run_id="")) is None
