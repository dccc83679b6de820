"""A restore to an older checkpoint: run 6 epochs, restore to 3 the way ``lifecycle/restore.py``
does (commit the restored lineage, ``fence(new_gen)``, ``retract_after(3, new_gen, before=import)``),
run 3 more; the table is what ``on_rewind`` documents.

The new generation's epochs either reuse the ids 4..6 (a rewound id sequence: the commits must be
generation-aware) or continue after the restore's import (7) with 8..10, as the runtime numbers them.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.sinks.postgres import PostgresTransactionalSink, RewindPolicy
from state_store.core.twophase import FencedTransactionError, SinkCommitConflict
from tests.unit.sinks_postgres.conftest import Db, batch, stage

OLD, NEW = 0, 1
RESTORED = 3
ID_SCHEMES = {"reused-ids": ((4, 5, 6), None), "monotonic-ids": ((8, 9, 10), 7)}


def old_run(n: int) -> pa.RecordBatch:
    """Generation 0, epoch n: updates 'shared', adds e<n>; 'late' is written at epochs 2 and 5."""
    keys = ["shared", f"e{n}", *(["late"] if n in (2, 5) else [])]
    return batch(k=keys, v=[n] * len(keys), g=[OLD] * len(keys))


def new_run(step: int) -> pa.RecordBatch:
    """Generation 1 after the restore (changed logic): updates 'shared', adds f<step> (4..6)."""
    return batch(k=["shared", f"f{step}"], v=[100 + step] * 2, g=[NEW] * 2)


def rewind_scenario(db: Db, sink: PostgresTransactionalSink, scheme: str) -> tuple[int, ...]:
    """Run it; return the new generation's checkpoint ids."""
    records = {}
    for n in range(1, 7):
        records[n] = stage(sink, n, old_run(n), gen=OLD)
        assert sink.commit([records[n]]) == (n,)
    new_ids, import_id = ID_SCHEMES[scheme]
    restorer = db.sink(unique_key=sink.unique_key, on_rewind=sink.on_rewind)
    assert restorer.recover_and_commit([records[RESTORED]]) == ()  # commit_lineage: already done
    restorer.fence(NEW)
    reason = f"restore into checkpoint {import_id} resumed from checkpoint {RESTORED}"
    assert restorer.retract_after(RESTORED, NEW, reason, before=import_id) == (4, 5, 6)
    assert restorer.committed_checkpoint_ids() == frozenset({1, 2, 3})
    for step, n in enumerate(new_ids, start=4):
        assert restorer.commit([stage(restorer, n, new_run(step), gen=NEW)]) == (n,)
    return new_ids


@pytest.mark.parametrize("scheme", ID_SCHEMES)
def test_keep_leaves_the_rewound_rows_and_upserts_the_reprocessed_keys(db: Db, scheme: str) -> None:
    new_ids = rewind_scenario(db, db.sink(unique_key=("k",)), scheme)
    assert db.rows() == sorted(
        [("shared", 106, NEW), ("late", 5, OLD)]
        + [(f"e{n}", n, OLD) for n in range(1, 7)]
        + [(f"f{s}", 100 + s, NEW) for s in (4, 5, 6)]
    )
    assert db.sink().committed_checkpoint_ids() == frozenset({1, 2, 3, *new_ids})
    assert db.sink().retracted_checkpoint_ids() == frozenset({4, 5, 6} - set(new_ids))


@pytest.mark.parametrize("scheme", ID_SCHEMES)
def test_overwrite_rewinds_the_table_to_the_restored_checkpoint(db: Db, scheme: str) -> None:
    new_ids = rewind_scenario(db, db.sink(unique_key=("k",), on_rewind=RewindPolicy.OVERWRITE), scheme)
    assert db.rows() == sorted(
        [("shared", 106, NEW), ("late", 2, OLD)]  # 'late' is back to what checkpoint 2 wrote
        + [(f"e{n}", n, OLD) for n in range(1, 4)]
        + [(f"f{s}", 100 + s, NEW) for s in (4, 5, 6)]
    )
    provenance = db.query("SELECT k, epochal_checkpoint_id, epochal_generation FROM {s}.out ORDER BY k")
    assert ("late", 2, OLD) in provenance and ("shared", new_ids[-1], NEW) in provenance
    assert db.query("SELECT count(*) FROM {s}.epochal_sink_undo WHERE checkpoint_id IN (4, 5, 6) "
                    "AND generation = 0") == [(0,)]  # fmt: skip


@pytest.mark.parametrize("policy", list(RewindPolicy))
def test_append_mode_rewind_keeps_or_deletes_the_old_generations_rows(db: Db, policy: RewindPolicy) -> None:
    rewind_scenario(db, db.sink(on_rewind=policy), "reused-ids")
    old = [
        r
        for n in range(1, 7 if policy is RewindPolicy.KEEP else 4)
        for r in zip(*old_run(n).to_pydict().values())
    ]
    new = [r for s in (4, 5, 6) for r in zip(*new_run(s).to_pydict().values())]
    assert db.rows() == sorted(old + new)


def test_a_second_retraction_changes_nothing_and_spares_the_new_generation(db: Db) -> None:
    sink = db.sink(unique_key=("k",), on_rewind=RewindPolicy.OVERWRITE)
    rewind_scenario(db, sink, "reused-ids")
    rows, commits = db.rows(), db.commits()
    again = db.sink(unique_key=("k",), on_rewind=RewindPolicy.OVERWRITE)
    assert again.retract_after(RESTORED, NEW, "the restore's follow-up, run twice") == (4, 5, 6)
    assert (db.rows(), db.commits()) == (rows, commits)
    assert commits[-3:] == [(4, NEW, False), (5, NEW, False), (6, NEW, False)]


def test_the_old_generation_cannot_commit_or_resurrect_after_the_restore(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    rewind_scenario(db, sink, "monotonic-ids")
    rows = db.rows()
    with pytest.raises(FencedTransactionError):
        sink.commit([stage(sink, 11, old_run(7), gen=OLD)])
    assert db.rows() == rows
    assert db.sink().committed_checkpoint_ids() == frozenset({1, 2, 3, 8, 9, 10})


def test_a_reused_checkpoint_id_without_a_retraction_is_a_conflict_not_a_second_copy(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    for n in (1, 2):
        sink.commit([stage(sink, n, old_run(n), gen=OLD)])
    sink.fence(NEW)  # a restore to checkpoint 1 that did not retract checkpoint 2
    rows = db.rows()
    with pytest.raises(SinkCommitConflict, match="must retract it first") as caught:
        sink.commit([stage(sink, 2, new_run(4), gen=NEW)])
    assert "\n" not in str(caught.value)
    assert db.rows() == rows
