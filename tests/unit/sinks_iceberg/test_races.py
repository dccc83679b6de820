"""Two processes committing the same checkpoint of an Iceberg sink at once (two recoveries after a
crash, as ``tests/unit/review21`` forces them for Delta): one interleaving each, through the sink's
own kill hooks. The loser of the catalog's compare-and-swap decides again, finds the checkpoint
committed and returns () -- never an error, never a second commit."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.sinks.iceberg import AFTER_CREATE, BEFORE_ICEBERG_COMMIT
from state_store.core.ports import ObjectStore
from tests.unit.sinks_iceberg.support import both_readers, epochal_summaries, make_sink, standard_epoch

Catalog = dict[str, str]
UPSERT: dict[str, Any] = {"mode": "upsert", "unique_key": ("id",)}


class Once:
    """A kill switch running ``action`` once, at ``point``."""

    def __init__(self, point: str, action: Any) -> None:
        self.point, self.action, self.fired = point, action, False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            self.action()


@pytest.mark.parametrize("options", [{}, UPSERT], ids=["append", "upsert"])
def test_two_processes_recovering_the_same_checkpoint_commit_it_once(
    store: ObjectStore, catalog: Catalog, options: dict[str, Any]
) -> None:
    first = make_sink(store, catalog, **options)
    first.commit(standard_epoch(first, 1))
    records: list[Any] = []

    def other_process() -> None:
        assert make_sink(store, catalog, **options).recover_and_commit(records) == (2,)

    a = make_sink(store, catalog, kill=Once(BEFORE_ICEBERG_COMMIT, other_process), **options)
    records.extend(standard_epoch(a, 2))
    assert a.recover_and_commit(records) == ()
    assert len(both_readers(catalog)) == 12
    assert [s["checkpoint_id"] for s in epochal_summaries(catalog)] == [1, 2]  # new keys: appends only


@pytest.mark.parametrize("point", [AFTER_CREATE, BEFORE_ICEBERG_COMMIT])
@pytest.mark.parametrize("options", [{}, UPSERT], ids=["append", "upsert"])
def test_two_processes_creating_the_table_with_the_same_checkpoint_commit_it_once(
    store: ObjectStore, catalog: Catalog, options: dict[str, Any], point: str
) -> None:
    records: list[Any] = []

    def other_process() -> None:
        assert make_sink(store, catalog, **options).recover_and_commit(records) == (1,)

    a = make_sink(store, catalog, kill=Once(point, other_process), **options)
    records.extend(standard_epoch(a, 1))
    assert a.recover_and_commit(records) == ()
    assert len(both_readers(catalog)) == 6
    assert [s["checkpoint_id"] for s in epochal_summaries(catalog)] == [1]
