"""Restore to an older checkpoint: the re-run's checkpoints commit (decided by lineage, never skipped
because an older generation committed a higher id), and ``on_rewind`` decides what happens to the
rows the rewound run committed after the restored checkpoint.

The restore is simulated as ``spark_jobs.lifecycle.restore`` does it: the imported checkpoint takes
the next free id (7 after six epochs), the sinks are fenced with the new generation, then
``retract_after(3, generation, reason, before=7)``; the re-run replays epochs 4-6 as 8-10 (or as
4-6 again: reused ids).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from spark_jobs.sinks import RewindRefused
from spark_jobs.sinks.iceberg import IcebergTransactionalSink
from state_store.core.ports import ObjectStore
from state_store.core.twophase import PreCommittedTxn, commit_pending_transactions
from tests.unit.sinks_iceberg.support import (
    batch,
    both_readers,
    epochal_summaries,
    load,
    make_sink,
    pre_commit_epoch,
    snapshot,
)

IMPORT = 7
Catalog = dict[str, str]


def append_epoch(
    sink: IcebergTransactionalSink, epoch: int, checkpoint_id: int, generation: int
) -> list[PreCommittedTxn]:
    rows = {s: [batch([epoch * 100 + s * 10 + i for i in range(3)], epoch=epoch, subtask=s)] for s in (0, 1)}
    return pre_commit_epoch(sink, checkpoint_id, rows, generation=generation)


def ids_of(rows: list[dict[str, Any]]) -> Counter[int]:
    return Counter(r["id"] for r in rows)


def restore(sink: IcebergTransactionalSink, to: int, generation: int, before: int) -> tuple[int, ...]:
    sink.fence(generation)
    return sink.retract_after(
        to, generation, f"restore into checkpoint {before} from checkpoint {to}", before=before
    )


def six_then_rewind_to_three(
    store: ObjectStore, catalog: Catalog, table: str, on_rewind: str, rerun_ids: tuple[int, ...]
) -> tuple[IcebergTransactionalSink, tuple[int, ...]]:
    sink = make_sink(store, catalog, table=table, on_rewind=on_rewind)
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    withdrawn = restore(make_sink(store, catalog, table=table, on_rewind=on_rewind), 3, 2, IMPORT)
    rerun = make_sink(store, catalog, table=table, on_rewind=on_rewind)
    records = [r for epoch, n in zip((4, 5, 6), rerun_ids) for r in append_epoch(rerun, epoch, n, 2)]
    report = commit_pending_transactions(rerun, records, max(rerun_ids))
    assert report.committed == rerun_ids  # decided by lineage: none skipped as already done
    return rerun, withdrawn


@pytest.mark.parametrize("rerun_ids", [(8, 9, 10), (4, 5, 6)], ids=["higher-ids", "reused-ids"])
def test_overwrite_withdraws_the_rewound_rows_so_the_table_equals_a_run_that_never_went_past_3(
    store: ObjectStore, catalog: Catalog, rerun_ids: tuple[int, ...]
) -> None:
    plain = make_sink(store, catalog, table="lake.reference", uid="reference")
    for epoch in range(1, 7):
        plain.commit(append_epoch(plain, epoch, epoch, 1))
    sink, withdrawn = six_then_rewind_to_three(store, catalog, "lake.rewound", "overwrite", rerun_ids)
    assert withdrawn == (4, 5, 6)
    assert both_readers(catalog, "lake.rewound") == both_readers(catalog, "lake.reference")
    assert sink.retracted_ids() == {4, 5, 6}


@pytest.mark.parametrize("rerun_ids", [(8, 9, 10), (4, 5, 6)], ids=["higher-ids", "reused-ids"])
def test_keep_leaves_the_rewound_rows_and_adds_the_rerun_so_epochs_4_to_6_appear_twice(
    store: ObjectStore, catalog: Catalog, rerun_ids: tuple[int, ...]
) -> None:
    sink, withdrawn = six_then_rewind_to_three(store, catalog, "lake.kept", "keep", rerun_ids)
    assert withdrawn == () and sink.retracted_ids() == frozenset()
    counts = ids_of(both_readers(catalog, "lake.kept"))
    assert {i for i, c in counts.items() if c == 1} == {i for i in counts if i < 400}
    assert {i for i, c in counts.items() if c == 2} == {i for i in counts if i >= 400}
    assert len(counts) == 36


def test_rewind_is_one_commit_and_a_retried_rewind_changes_nothing(
    store: ObjectStore, catalog: Catalog
) -> None:
    sink = make_sink(store, catalog, on_rewind="overwrite")
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    sink.fence(2)
    table = load(catalog)
    assert table is not None
    count = len(table.snapshots())
    assert sink.retract_after(3, 2, "restore", before=IMPORT) == (4, 5, 6)
    at = snapshot(catalog)
    again = make_sink(store, catalog, on_rewind="overwrite")
    assert again.retract_after(3, 2, "restore", before=IMPORT) == (4, 5, 6)
    table = load(catalog)
    assert table is not None and len(table.snapshots()) == count + 1 and snapshot(catalog) == at
    rewind = epochal_summaries(catalog)[-1]
    assert (rewind["kind"], rewind["withdrawn"], rewind["generation"]) == ("rewind", [4, 5, 6], 2)
    assert table.properties["epochal/job-1/orders-sink/rewind"] == "2"


def test_upsert_mode_rewind_restores_upserted_keys_and_drops_keys_only_the_rewound_run_wrote(
    store: ObjectStore, catalog: Catalog
) -> None:
    def run(on_rewind: str) -> dict[int, str]:
        table = f"lake.upsert_{on_rewind}"
        options: dict[str, Any] = {"mode": "upsert", "unique_key": ("id",), "on_rewind": on_rewind}
        sink = make_sink(store, catalog, uid=f"sink-{on_rewind}", table=table, **options)
        for epoch in range(1, 7):
            extra = [999] if epoch == 5 else []  # a key only the rewound run produced
            sink.commit(pre_commit_epoch(sink, epoch, {0: [batch([1, 2, epoch * 10, *extra], epoch=epoch)]}))
        restore(make_sink(store, catalog, uid=f"sink-{on_rewind}", table=table, **options), 3, 2, IMPORT)
        for n, epoch in zip((8, 9, 10), (4, 5, 6)):
            rows = {0: [batch([1, epoch * 10], epoch=epoch + 100)]}  # the re-run differs (new input arrived)
            sink.commit(pre_commit_epoch(sink, n, rows, generation=2))
        return {r["id"]: r["value"] for r in both_readers(catalog, table)}

    overwritten = run("overwrite")
    assert overwritten == {
        1: "e106-s0-1", 2: "e3-s0-2", 10: "e1-s0-10", 20: "e2-s0-20", 30: "e3-s0-30",
        40: "e104-s0-40", 50: "e105-s0-50", 60: "e106-s0-60",
    }  # fmt: skip
    kept = run("keep")
    assert kept == {**overwritten, 2: "e6-s0-2", 999: "e5-s0-999"}


def test_a_second_restore_rewinds_across_the_first_rewind(store: ObjectStore, catalog: Catalog) -> None:
    sink = make_sink(store, catalog, on_rewind="overwrite")
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    restore(sink, 3, 2, IMPORT)
    for n, epoch in ((8, 4), (9, 5)):
        sink.commit(append_epoch(sink, epoch, n, 2))
    assert restore(sink, 8, 3, 10) == (9,)
    for n, epoch in ((11, 5), (12, 6)):
        sink.commit(append_epoch(sink, epoch, n, 3))
    assert sorted(ids_of(both_readers(catalog)).values()) == [1] * 36
    assert restore(sink, 2, 4, 13) == (3, 8, 11, 12)
    assert sorted(ids_of(both_readers(catalog))) == [
        100,
        101,
        102,
        110,
        111,
        112,
        200,
        201,
        202,
        210,
        211,
        212,
    ]
    assert restore(sink, 0, 5, 14) == (1, 2)  # before the first commit: no rows at all
    assert both_readers(catalog) == []


def test_rewind_refuses_to_undo_another_writers_rows(store: ObjectStore, catalog: Catalog) -> None:
    sink = make_sink(store, catalog, on_rewind="overwrite")
    for epoch in range(1, 5):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    table = load(catalog)
    assert table is not None
    table.append(table.scan().to_arrow().slice(0, 1))  # someone else appends rows
    sink.fence(2)
    rows, at = both_readers(catalog), snapshot(catalog)
    with pytest.raises(RewindRefused, match=r"another writer.*on_rewind='keep'"):
        sink.retract_after(2, 2, "restore", before=IMPORT)
    assert (both_readers(catalog), snapshot(catalog)) == (rows, at)


def test_rewind_keeps_the_rows_another_writer_wrote_before_the_sinks_first_commit(
    store: ObjectStore, catalog: Catalog
) -> None:
    theirs = pa.table({"id": pa.array([5], pa.int64()), "value": pa.array(["theirs"])})
    other = load_catalog("default", **catalog)
    other.create_namespace("lake")
    other.create_table("lake.orders", schema=theirs.schema).append(theirs)  # the table's owner
    sink = make_sink(store, catalog, on_rewind="overwrite")
    for epoch in (1, 2):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    sink.fence(2)
    assert sink.retract_after(0, 2, "restore", before=IMPORT) == (1, 2)
    assert both_readers(catalog) == theirs.to_pylist()


def test_rewind_never_withdraws_the_new_generations_output(store: ObjectStore, catalog: Catalog) -> None:
    sink = make_sink(store, catalog, on_rewind="overwrite")
    for epoch in range(1, 5):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    sink.fence(2)
    sink.commit(append_epoch(sink, 9, 8, 2))  # the new generation already committed
    with pytest.raises(RewindRefused, match="output of the restored run"):
        sink.retract_after(2, 2, "restore", before=IMPORT)
