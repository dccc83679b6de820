"""Restore to an older checkpoint: the re-run's checkpoints commit (decided by lineage, never skipped
because an older generation committed a higher id), and ``on_rewind`` decides what happens to the
rows the rewound run committed after the restored checkpoint.

The restore is simulated as ``spark_jobs.lifecycle.restore`` does it: the imported checkpoint takes
the next free id (7 after six epochs), the sinks are fenced with the new generation, then
``retract_after(3, generation, reason, before=7)``; the re-run replays epochs 4-6 as 8-10.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.sinks import DeltaTransactionalSink, RewindRefused
from state_store.core.ports import ObjectStore
from state_store.core.twophase import PreCommittedTxn, commit_pending_transactions
from tests.unit.sinks_delta.support import batch, both_readers, make_sink, pre_commit_epoch, version

IMPORT = 7


def append_epoch(
    sink: DeltaTransactionalSink, epoch: int, checkpoint_id: int, generation: int
) -> list[PreCommittedTxn]:
    rows = {s: [batch([epoch * 100 + s * 10 + i for i in range(3)], epoch=epoch, subtask=s)] for s in (0, 1)}
    return pre_commit_epoch(sink, checkpoint_id, rows, generation=generation)


def ids_of(rows: list[dict[str, Any]]) -> Counter[int]:
    return Counter(r["id"] for r in rows)


def restore(sink: DeltaTransactionalSink, to: int, generation: int, before: int) -> tuple[int, ...]:
    sink.fence(generation)
    return sink.retract_after(
        to, generation, f"restore into checkpoint {before} from checkpoint {to}", before=before
    )


def six_then_rewind_to_three(
    store: ObjectStore, table: Path, on_rewind: str, rerun_ids: tuple[int, ...]
) -> tuple[DeltaTransactionalSink, tuple[int, ...]]:
    sink = make_sink(store, table, on_rewind=on_rewind)
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    withdrawn = restore(make_sink(store, table, on_rewind=on_rewind), 3, 2, IMPORT)
    rerun = make_sink(store, table, on_rewind=on_rewind)
    records = [r for epoch, n in zip((4, 5, 6), rerun_ids) for r in append_epoch(rerun, epoch, n, 2)]
    report = commit_pending_transactions(rerun, records, max(rerun_ids))
    assert report.committed == rerun_ids  # decided by lineage: none skipped as already done
    return rerun, withdrawn


@pytest.mark.parametrize("rerun_ids", [(8, 9, 10), (4, 5, 6)], ids=["higher-ids", "reused-ids"])
def test_overwrite_withdraws_the_rewound_rows_so_the_table_equals_a_run_that_never_went_past_3(
    store: ObjectStore, tmp_path: Path, rerun_ids: tuple[int, ...]
) -> None:
    reference = tmp_path / "reference"
    plain = make_sink(store, reference)
    for epoch in range(1, 7):
        plain.commit(append_epoch(plain, epoch, epoch, 1))
    table = tmp_path / "rewound"
    sink, withdrawn = six_then_rewind_to_three(store, table, "overwrite", rerun_ids)
    assert withdrawn == (4, 5, 6)
    assert both_readers(table) == both_readers(reference)  # nothing dropped, nothing doubled
    assert sink.retracted_ids() == {4, 5, 6}


@pytest.mark.parametrize("rerun_ids", [(8, 9, 10), (4, 5, 6)], ids=["higher-ids", "reused-ids"])
def test_keep_leaves_the_rewound_rows_and_adds_the_rerun_so_epochs_4_to_6_appear_twice(
    store: ObjectStore, tmp_path: Path, rerun_ids: tuple[int, ...]
) -> None:
    table = tmp_path / "kept"
    sink, withdrawn = six_then_rewind_to_three(store, table, "keep", rerun_ids)
    assert withdrawn == () and sink.retracted_ids() == frozenset()
    counts = ids_of(both_readers(table))
    assert {i for i, c in counts.items() if c == 1} == {i for i in counts if i < 400}
    assert {i for i, c in counts.items() if c == 2} == {i for i in counts if i >= 400}
    assert len(counts) == 36


def test_rewind_is_one_commit_and_a_retried_rewind_changes_nothing(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table, on_rewind="overwrite")
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    sink.fence(2)
    at = version(table)
    assert sink.retract_after(3, 2, "restore", before=IMPORT) == (4, 5, 6)
    assert version(table) == at + 1
    assert make_sink(store, table, on_rewind="overwrite").retract_after(3, 2, "restore", before=IMPORT) == (
        4,
        5,
        6,
    )
    assert version(table) == at + 1
    assert DeltaTable(str(table)).history(1)[0]["epochal"]["withdrawn"] == [4, 5, 6]


def test_merge_mode_rewind_restores_upserted_keys_and_drops_keys_only_the_rewound_run_wrote(
    store: ObjectStore, tmp_path: Path
) -> None:
    def run(table: Path, on_rewind: str) -> dict[int, str]:
        options: dict[str, Any] = {"mode": "merge", "unique_key": ("id",), "on_rewind": on_rewind}
        sink = make_sink(store, table, uid=f"sink-{on_rewind}", **options)  # one job store: own uids
        for epoch in range(1, 7):
            extra = [999] if epoch == 5 else []  # a key only the rewound run produced
            sink.commit(pre_commit_epoch(sink, epoch, {0: [batch([1, 2, epoch * 10, *extra], epoch=epoch)]}))
        restore(make_sink(store, table, uid=f"sink-{on_rewind}", **options), 3, 2, IMPORT)
        for n, epoch in zip((8, 9, 10), (4, 5, 6)):
            rows = {0: [batch([1, epoch * 10], epoch=epoch + 100)]}  # the re-run differs (new input arrived)
            sink.commit(pre_commit_epoch(sink, n, rows, generation=2))
        return {r["id"]: r["value"] for r in both_readers(table)}

    overwritten = run(tmp_path / "overwrite", "overwrite")
    assert overwritten == {
        1: "e106-s0-1", 2: "e3-s0-2", 10: "e1-s0-10", 20: "e2-s0-20", 30: "e3-s0-30",
        40: "e104-s0-40", 50: "e105-s0-50", 60: "e106-s0-60",
    }  # fmt: skip
    kept = run(tmp_path / "keep", "keep")
    assert kept == {**overwritten, 2: "e6-s0-2", 999: "e5-s0-999"}


def test_a_second_restore_rewinds_across_the_first_rewind(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table, on_rewind="overwrite")
    for epoch in range(1, 7):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    restore(sink, 3, 2, IMPORT)
    for n, epoch in ((8, 4), (9, 5)):
        sink.commit(append_epoch(sink, epoch, n, 2))
    assert restore(sink, 8, 3, 10) == (9,)
    for n, epoch in ((11, 5), (12, 6)):
        sink.commit(append_epoch(sink, epoch, n, 3))
    assert sorted(ids_of(both_readers(table)).values()) == [1] * 36
    assert restore(sink, 2, 4, 13) == (3, 8, 11, 12)
    assert sorted(ids_of(both_readers(table))) == [100, 101, 102, 110, 111, 112, 200, 201, 202, 210, 211, 212]


def test_rewind_refuses_to_undo_another_writers_rows(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table, on_rewind="overwrite")
    for epoch in range(1, 5):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    other = DeltaTable(str(table)).to_pyarrow_table().slice(0, 1)
    write_deltalake(str(table), other, mode="append")  # someone else appends rows
    sink.fence(2)
    rows, at = both_readers(table), version(table)
    with pytest.raises(RewindRefused, match=r"another writer.*on_rewind='keep'"):
        sink.retract_after(2, 2, "restore", before=IMPORT)
    assert (both_readers(table), version(table)) == (rows, at)


def test_rewind_never_withdraws_the_new_generations_output(store: ObjectStore, table: Path) -> None:
    sink = make_sink(store, table, on_rewind="overwrite")
    for epoch in range(1, 5):
        sink.commit(append_epoch(sink, epoch, epoch, 1))
    sink.fence(2)
    sink.commit(append_epoch(sink, 9, 8, 2))  # the new generation already committed
    with pytest.raises(RewindRefused, match="output of the restored run"):
        sink.retract_after(2, 2, "restore", before=IMPORT)
