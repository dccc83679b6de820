"""Rewinding a Delta sink's table to an older checkpoint (``on_rewind="overwrite"``): the plan.

A restore to checkpoint *a* in generation *G* calls ``retract_after(a, G, reason, before=import)``.
With ``on_rewind="overwrite"`` the sink withdraws, in ONE Delta commit, every row its older
generations committed for checkpoints above *a* (and below ``before``): a Delta RESTORE to the table
version of its commit of the newest checkpoint <= *a* (files added since are removed, files a merge
removed since are added back), or a delete of every row when no such commit exists and the whole log
is the sink's own. The restore also reverts schema and property changes made since.

:func:`plan_rewind` reads the log newest first:

1. a rewind commit of this sink by generation >= G: already done -> its withdrawn ids (idempotent);
2. a data commit of checkpoint <= *a*: the target version; stop;
3. a data commit of checkpoint > *a*, of a generation < G and below ``before``: withdrawn; any other
   data commit of the sink (the new generation's output) refuses the rewind -- never withdrawn;
4. an older rewind commit: the versions between it and the version it restored are undone already:
   continue below that version (or, if it removed every row, treat the log as ending at version 0);
5. another writer's commit: skipped if it changes no rows (OPTIMIZE, VACUUM, properties, columns,
   constraints); its CREATE TABLE is the target (the table as that writer made it); any other
   refuses the rewind -- a restore would undo that writer's rows;
6. the log ends: at version 0 -> delete every row; cut earlier by log cleanup -> refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spark_jobs.sinks.delta_ledger import CommitKind, LoggedCommit
from state_store.core.twophase import SinkCommitError

NO_DATA_OPERATIONS = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "ADD COLUMN",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "ADD FEATURE",
        "UPDATE FIELD METADATA",
        "UPDATE TABLE METADATA",
        "FSCK",
    }
)


class RewindRefused(SinkCommitError):
    """The table cannot be rewound without undoing rows this rewind must keep."""


@dataclass(frozen=True, slots=True)
class RewindPlan:
    """``target``: the table version to restore (-1: delete every row); ``done``: a rewind of this
    generation is already in the log (nothing to do); ``withdrawn``: the checkpoint ids undone."""

    target: int
    withdrawn: tuple[int, ...]
    done: bool = False


def plan_rewind(
    commits: Iterable[LoggedCommit], *, after: int, generation: int, before: int | None, table: str
) -> RewindPlan:
    """Steps 1-6 of the module docstring (``commits``: newest first)."""
    withdrawn: list[int] = []
    skip_above: int | None = None
    oldest: int | None = None
    for commit in commits:
        oldest = commit.version
        if skip_above is not None and commit.version > skip_above:
            continue
        info = commit.info
        if info is None:
            if commit.operation.upper() == "CREATE TABLE":  # created by someone else: keep what it made
                return RewindPlan(commit.version, tuple(sorted(withdrawn)))
            if commit.operation.upper() not in NO_DATA_OPERATIONS:
                raise RewindRefused(
                    f"Delta table {table}: version {commit.version} ({commit.operation}) was written by "
                    f"another writer after checkpoint {after}'s commit; on_rewind='overwrite' restores "
                    "the table to that commit and would undo it: remove the rows of the rewound "
                    "checkpoints yourself, or use on_rewind='keep'"
                )
            continue
        if info.kind is CommitKind.REWIND:
            if info.generation >= generation:
                return RewindPlan(info.restored_version, info.withdrawn, done=True)
            if info.checkpoint_id <= after:  # the table is as it was after that checkpoint
                return RewindPlan(commit.version, tuple(sorted(withdrawn)))
            if info.restored_version < 0:  # it removed every row: nothing older is in the table
                return RewindPlan(-1, tuple(sorted(withdrawn)))
            skip_above = info.restored_version
            continue
        if info.kind is not CommitKind.DATA:
            continue
        if info.checkpoint_id <= after:
            return RewindPlan(commit.version, tuple(sorted(withdrawn)))
        if info.generation >= generation or (before is not None and info.checkpoint_id >= before):
            raise RewindRefused(
                f"Delta table {table}: checkpoint {info.checkpoint_id} of generation {info.generation} "
                f"(version {commit.version}) is output of the restored run, which a rewind to "
                f"checkpoint {after} must keep: rewind before generation {generation} commits"
            )
        withdrawn.append(info.checkpoint_id)
    if oldest is not None and oldest > 0:
        raise RewindRefused(
            f"Delta table {table}: the log before version {oldest} was cleaned up, so the version "
            f"after checkpoint {after}'s commit is unknown: remove the rows of checkpoints "
            f"{sorted(withdrawn)} yourself, or use on_rewind='keep'"
        )
    return RewindPlan(-1, tuple(sorted(withdrawn)))
