"""Rewinding an Iceberg sink's table to an older checkpoint (``on_rewind="overwrite"``): the plan.

A restore to checkpoint *a* in generation *G* calls ``retract_after(a, G, reason, before=import)``.
With ``on_rewind="overwrite"`` the sink withdraws, in ONE commit, every row its older generations
committed for checkpoints above *a* (and below ``before``): an overwrite snapshot that makes the
table's data files those of its *target* snapshot -- the newest snapshot of the sink's commit of the
newest checkpoint <= *a* -- deleting the files added since and adding back the files removed since
(an upsert's rewritten files). Rows equal the target's exactly; the schema and properties stay.

:func:`plan_rewind` reads the ancestors of the current snapshot, newest first (as ``delta_rewind``
reads the Delta log):

1. a rewind snapshot of this sink by generation >= G: already done -> its withdrawn ids (idempotent);
2. a data snapshot of checkpoint <= *a*: the target; stop;
3. a data snapshot of checkpoint > *a*, of a generation < G and below ``before``: withdrawn; any
   other data snapshot of the sink (the new generation's output) refuses the rewind -- never withdrawn;
4. an older rewind snapshot: of checkpoint <= *a*, the target (the table is as after that checkpoint);
   else the snapshots between it and the snapshot it restored are undone already: continue at that
   snapshot (or, if it removed every row, the target is "no rows");
5. another writer's snapshot (or a fence): skipped if it changes no rows or only rewrites files
   (``replace``: compaction); if it changed rows and none of the sink's snapshots is older, it is
   the target (the table as that writer left it before the sink's first commit); else the rewind is
   refused -- it would undo that writer's rows;
6. the ancestors end: at the table's first snapshot -> no rows; cut by snapshot expiry -> refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spark_jobs.sinks.delta_ledger import CommitKind
from spark_jobs.sinks.delta_rewind import RewindRefused
from spark_jobs.sinks.iceberg_ledger import LoggedSnapshot

NO_ROWS = -1


@dataclass(frozen=True, slots=True)
class RewindPlan:
    """``target``: the snapshot whose data files the table gets back (:data:`NO_ROWS`: none);
    ``done``: a rewind of this generation is already in the table; ``withdrawn``: checkpoint ids."""

    target: int
    withdrawn: tuple[int, ...]
    done: bool = False


def plan_rewind(
    snapshots: Sequence[LoggedSnapshot], *, after: int, generation: int, before: int | None, table: str
) -> RewindPlan:
    """Steps 1-6 of the module docstring (``snapshots``: newest first)."""
    withdrawn: set[int] = set()
    skip_to: int | None = None
    for i, snap in enumerate(snapshots):
        if skip_to is not None:
            if snap.snapshot_id != skip_to:
                continue
            skip_to = None
        info = snap.info
        if info is None:
            if not snap.changes_rows or snap.operation == "replace":
                continue
            if not any(s.info is not None and s.info.kind is CommitKind.DATA for s in snapshots[i + 1 :]):
                return RewindPlan(snap.snapshot_id, tuple(sorted(withdrawn)))
            raise RewindRefused(
                f"Iceberg table {table}: snapshot {snap.snapshot_id} ({snap.operation}) was written by "
                f"another writer after checkpoint {after}'s commit; on_rewind='overwrite' would undo "
                "it: remove the rows of the rewound checkpoints yourself, or use on_rewind='keep'"
            )
        if info.kind is CommitKind.REWIND:
            if info.generation >= generation:
                return RewindPlan(info.restored_version, info.withdrawn, done=True)
            if info.checkpoint_id <= after:
                return RewindPlan(snap.snapshot_id, tuple(sorted(withdrawn)))
            if info.restored_version == NO_ROWS:
                return RewindPlan(NO_ROWS, tuple(sorted(withdrawn)))
            skip_to = info.restored_version
            continue
        if info.kind is not CommitKind.DATA:
            continue
        if info.checkpoint_id <= after:
            return RewindPlan(snap.snapshot_id, tuple(sorted(withdrawn)))
        if info.generation >= generation or (before is not None and info.checkpoint_id >= before):
            raise RewindRefused(
                f"Iceberg table {table}: checkpoint {info.checkpoint_id} of generation {info.generation} "
                f"(snapshot {snap.snapshot_id}) is output of the restored run, which a rewind to "
                f"checkpoint {after} must keep: rewind before generation {generation} commits"
            )
        withdrawn.add(info.checkpoint_id)
    cut = skip_to is not None or (bool(snapshots) and snapshots[-1].parent_id is not None)
    if cut:
        raise RewindRefused(
            f"Iceberg table {table}: the snapshots before checkpoint {after}'s commit were expired, so "
            f"the table as it was then is unknown: remove the rows of checkpoints {sorted(withdrawn)} "
            "yourself, or use on_rewind='keep'"
        )
    return RewindPlan(NO_ROWS, tuple(sorted(withdrawn)))
