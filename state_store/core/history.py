"""The one read model of a job's checkpoints: what each checkpoint folder's documents say, as a
:class:`CheckpointSummary` (status, reason, sizes, times, lineage). The CLI's history, the Airflow
trigger and sensor, the failure-rate restart strategy, chaos and monitoring all read checkpoints
through :func:`summarize`; monitoring adds only its validation column and caches the rows.

Invariants (``state_store.core.status``): ``status`` is COMPLETED iff ``_metadata.json`` exists,
ABORTED iff the decision is ABORT, COMPLETING iff decided COMPLETE without metadata yet, IN_PROGRESS
iff undecided, UNREADABLE iff a document cannot be read (``reason`` says which and why). ``acked``
counts the acks of the newest attempt, at most ``expected``. Reads only; nothing is written.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, DecisionRecord, Outcome, PendingRecord, TaskSnapshot
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.status import CheckpointStatus, status_of


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    checkpoint_id: int
    status: CheckpointStatus  # COMPLETED | ABORTED | IN_PROGRESS | COMPLETING | UNREADABLE
    trigger_ms: int
    end_ms: int | None
    acked: int
    expected: int
    state_bytes: int
    savepoint: bool
    generation: int
    reason: str = ""
    incremental_bytes: int = 0
    """Bytes this checkpoint uploaded (a reused incremental file costs nothing)."""
    alignment_ms: int | None = None
    """The longest barrier alignment a subtask reported (None: none reported)."""
    run_id: str = ""
    """The trigger's request id (the Airflow DAG run), "" outside Airflow."""
    base: int | None = None
    """The chain head it continues (its lineage); None for the first checkpoint and an import."""
    restored_from: str = ""
    """An import's snapshot location ("" for an epoch's checkpoint)."""
    wall_trigger_ms: int = 0
    """Wall-clock time of the trigger (0: not recorded, e.g. written by an older Epochal)."""
    wall_end_ms: int = 0
    """Wall-clock time of the completion or abort (0: not recorded, or not decided)."""

    @property
    def duration_ms(self) -> int | None:
        """None while running -- and when the end precedes the trigger (the decision was taken on
        another clock, e.g. a restore's): a duration is never negative. True (wall-clock) when the
        wall times were recorded: ``end_ms`` is then the trigger plus the measured duration (see
        :func:`end_on_trigger_axis`)."""
        if self.end_ms is None or self.end_ms < self.trigger_ms:
            return None
        return self.end_ms - self.trigger_ms


def end_on_trigger_axis(trigger_ms: int, logical_end_ms: int, wall_trigger_ms: int, wall_end_ms: int) -> int:
    """The end of a checkpoint on its trigger's (logical) time axis: ``trigger_ms`` plus the
    wall-clock duration when both wall times were recorded and ordered, else the logical end.

    Why: an epoch's logical clock stands still while it runs (an Airflow run's data-interval end, a
    simulated step), so the logical end equals the trigger and every duration read "0 ms"; the wall
    times measure what really happened. Readers keep ``end_ms - trigger_ms`` as the duration and
    ``end_ms`` comparable with other logical times (the failure-rate window)."""
    if wall_trigger_ms > 0 and wall_end_ms >= wall_trigger_ms:
        return trigger_ms + (wall_end_ms - wall_trigger_ms)
    return logical_end_ms


def checkpoint_history(store: ObjectStore, job_id: str) -> list[CheckpointSummary]:
    """One summary per allocated checkpoint id still in storage, ascending."""
    layout = JobLayout(job_id)
    ids = sorted(
        {
            i
            for info in store.list(layout.checkpoints_prefix)
            if info.key.endswith("/_pending.json") and (i := layout.checkpoint_id_of(info.key)) is not None
        }
    )
    return [summarize(store, layout, i)[0] for i in ids]


def checkpoint_summary(store: ObjectStore, job_id: str, checkpoint_id: int) -> CheckpointSummary | None:
    """The summary of one checkpoint (None if it was never triggered or retention removed it): what
    the Airflow trigger and sensor wait on, read as the history reads it."""
    layout = JobLayout(job_id)
    if store.head(layout.pending(checkpoint_id)) is None:
        return None
    return summarize(store, layout, checkpoint_id)[0]


def summarize(
    store: ObjectStore,
    layout: JobLayout,
    checkpoint_id: int,
    *,
    present: Collection[str] | None = None,
    acks_by_attempt: Mapping[int, int] | None = None,
) -> tuple[CheckpointSummary, int]:
    """Read one checkpoint folder; returns its summary and the number of documents read.

    A caller that listed the folder passes what the listing showed, so nothing is read in vain:
    ``present`` (the document names in it) and ``acks_by_attempt`` (attempt -> ack count); then the
    decision is not read once the metadata exists. Without them every document is read (a damaged
    one makes the checkpoint UNREADABLE) and the acks are listed."""
    reads = 1
    try:
        pending = documents.read(store, layout.pending(checkpoint_id), PendingRecord)
        meta = decision = None
        if present is None or "_metadata.json" in present:
            meta = documents.read_optional(store, layout.metadata(checkpoint_id), CompletedMetadata)
            reads += 1
        # without a listing every document is read, so a damaged decision behind a good metadata
        # document is UNREADABLE (the next epoch refuses it too); a listing-fed reader (monitoring,
        # at scale) reads the decision only while it is the newest document
        if present is None or (meta is None and "_decision.json" in present):
            decision = documents.read_optional(store, layout.decision(checkpoint_id), DecisionRecord)
            reads += 1
        barrier = pending.barrier
    except (ManifestError, ObjectNotFound) as exc:
        unreadable = CheckpointSummary(
            checkpoint_id, CheckpointStatus.UNREADABLE, 0, None, 0, 0, 0, False, 0, str(exc)
        )
        return unreadable, reads
    expected = len(pending.expected)
    status = status_of(
        has_metadata=meta is not None,
        decided=decision is not None,
        aborted=decision is not None and decision.outcome is Outcome.ABORT,
    )
    common: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "status": status,
        "trigger_ms": pending.trigger_ms,
        "expected": expected,
        "savepoint": pending.properties.savepoint,
        "generation": pending.generation,
        "run_id": pending.request_id,
        "base": barrier.base,
        "restored_from": barrier.restored_from or "",
    }
    if meta is not None:
        tasks = meta.tasks
        summary = CheckpointSummary(
            end_ms=end_on_trigger_axis(
                pending.trigger_ms, meta.completed_ms, meta.wall_trigger_ms, meta.wall_completed_ms
            ),
            wall_trigger_ms=meta.wall_trigger_ms,
            wall_end_ms=meta.wall_completed_ms,
            acked=len(tasks),
            state_bytes=meta.state_size,
            incremental_bytes=sum(incremental_bytes(layout, t) for t in tasks),
            alignment_ms=longest_alignment([t.metrics for t in tasks]),
            **common,
        )
        return summary, reads
    counts = (
        acks_by_attempt if acks_by_attempt is not None else _acks_by_attempt(store, layout, checkpoint_id)
    )
    acked = min(counts.get(max(counts, default=0), 0), expected)
    aborted = decision is not None and decision.outcome is Outcome.ABORT
    summary = CheckpointSummary(
        end_ms=end_on_trigger_axis(
            pending.trigger_ms, decision.decided_ms, pending.wall_trigger_ms, decision.wall_decided_ms
        )
        if aborted and decision is not None
        else None,
        wall_trigger_ms=pending.wall_trigger_ms,
        wall_end_ms=decision.wall_decided_ms if aborted and decision is not None else 0,
        acked=acked,
        state_bytes=0,
        reason=f"{decision.reason}: {decision.message}".rstrip(": ") if aborted and decision else "",
        **common,
    )
    return summary, reads


def incremental_bytes(layout: JobLayout, task: TaskSnapshot) -> int:
    """Bytes this task uploaded for the checkpoint: its ``bytes_written`` metric, else the size of
    the files it references outside ``shared/`` (those are exclusive to this checkpoint)."""
    written = task.metrics.get("bytes_written")
    if isinstance(written, int) and not isinstance(written, bool):
        return written
    return sum(h.size for h in task.handles if not h.key.startswith(layout.shared_prefix))


def longest_alignment(metrics: Sequence[Mapping[str, Any]]) -> int | None:
    values = [int(m["alignment_ms"]) for m in metrics if isinstance(m.get("alignment_ms"), int | float)]
    return max(values) if values else None


def ack_attempt(name: str) -> int | None:
    """The attempt of an ack file name ``acks/<task>-a<attempt>.json`` (None: not an ack)."""
    if "-a" not in name:
        return None
    attempt = name.rsplit("-a", 1)[1].removesuffix(".json")
    return int(attempt) if attempt.isdigit() else None


def _acks_by_attempt(store: ObjectStore, layout: JobLayout, checkpoint_id: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for info in store.list(layout.acks_prefix(checkpoint_id)):
        attempt = ack_attempt(info.key)
        if attempt is not None:
            counts[attempt] = counts.get(attempt, 0) + 1
    return counts
