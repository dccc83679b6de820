"""Checkpoint history rebuilt from storage (for the CLI, the demo and the monitoring views)."""

from __future__ import annotations

from dataclasses import dataclass

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, DecisionRecord, Outcome, PendingRecord
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

    @property
    def duration_ms(self) -> int | None:
        """None while running -- and when the end precedes the trigger (the decision was taken on
        another clock, e.g. a restore's): a duration is never negative."""
        if self.end_ms is None or self.end_ms < self.trigger_ms:
            return None
        return self.end_ms - self.trigger_ms


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
    return [_summary(store, layout, i) for i in ids]


def checkpoint_summary(store: ObjectStore, job_id: str, checkpoint_id: int) -> CheckpointSummary | None:
    """The summary of one checkpoint (None if it was never triggered or retention removed it): what
    the Airflow trigger and sensor wait on, read as the history reads it."""
    layout = JobLayout(job_id)
    if store.head(layout.pending(checkpoint_id)) is None:
        return None
    return _summary(store, layout, checkpoint_id)


def _summary(store: ObjectStore, layout: JobLayout, i: int) -> CheckpointSummary:
    try:
        pending = documents.read(store, layout.pending(i), PendingRecord)
        decision = documents.read_optional(store, layout.decision(i), DecisionRecord)
        meta = documents.read_optional(store, layout.metadata(i), CompletedMetadata)
    except (ManifestError, ObjectNotFound) as exc:
        return CheckpointSummary(i, CheckpointStatus.UNREADABLE, 0, None, 0, 0, 0, False, 0, str(exc))
    acks = {info.key for info in store.list(layout.acks_prefix(i))}
    expected = len(pending.expected)
    common = (pending.trigger_ms,)
    if meta is not None:
        return CheckpointSummary(
            i,
            CheckpointStatus.COMPLETED,
            *common,
            meta.completed_ms,
            expected,
            expected,
            meta.state_size,
            meta.properties.savepoint,
            meta.generation,
        )
    if decision is not None and decision.outcome is Outcome.ABORT:
        return CheckpointSummary(
            i,
            CheckpointStatus.ABORTED,
            *common,
            decision.decided_ms,
            min(len(acks), expected),
            expected,
            0,
            pending.properties.savepoint,
            pending.generation,
            f"{decision.reason}: {decision.message}",
        )
    status = status_of(has_metadata=False, decided=decision is not None, aborted=False)
    return CheckpointSummary(
        i,
        status,
        *common,
        None,
        min(len(acks), expected),
        expected,
        0,
        pending.properties.savepoint,
        pending.generation,
    )
