"""The acks a subtask writes for checkpoint n, as typed values; ``record(site)`` gives the
document the coordinator reads (``AckRecord``), unchanged from the hand-built ones before them.

A subtask acknowledges after its state uploads finished (``SubtaskRunner.acknowledge``)::

    declined, or no snapshot taken -> one DeclineRecord per expected uid, all with one reason
    else, in this order: one StateAck per stateful operator (chain order), one SinkAck per sink
    (the stage's sink, then side-output sinks), then a source subtask's SourceAck

Invariants:
  * every record carries the plan's generation and attempt (``AckSite``): a zombie's acks are
    UNKNOWN to the coordinator, and its sink files are never listed in a commit;
  * the channel state of an unaligned checkpoint is referenced by exactly one ack per subtask,
    the anchor's (``spark_jobs.runtime.channel_state``);
  * metrics of a StateAck: bytes and files written, state files referenced, the subtask's timing
    (seconds, 6 decimals), the barrier alignment (keyed subtasks), the subtask's peak memory
    (``peak_rss_bytes``, ``peak_rss_scope``: ``spark_jobs.runtime.memory``), then the operator's own
    metrics (which win on a name clash); sink and source acks carry the peak memory too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_jobs.runtime.channel_state import ChannelStateRef
from spark_jobs.runtime.state_io import WrittenSnapshot
from state_store.core.manifests import AckRecord, DeclineRecord, StateHandle, TaskId
from state_store.core.task_parts import SourcePart, TaskParts
from state_store.core.twophase import PreCommittedTxn, sink_snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class AckSite:
    """Who acknowledges: one subtask, for checkpoint n of the plan's generation and attempt."""

    checkpoint_id: int
    subtask: int
    generation: int
    attempt: int

    def record(
        self,
        uid: str,
        handles: tuple[StateHandle, ...],
        metrics: dict[str, Any],
        snapshot: dict[str, Any],
    ) -> AckRecord:
        task = TaskId(uid, self.subtask)
        return AckRecord(self.checkpoint_id, task, self.generation, self.attempt, handles, metrics, snapshot)

    def decline(self, uid: str, reason: str) -> DeclineRecord:
        return DeclineRecord(
            self.checkpoint_id, TaskId(uid, self.subtask), self.generation, self.attempt, reason
        )


@dataclass
class Timing:
    """Wall time a subtask spent restoring, snapshotting synchronously and waiting for uploads."""

    restore_s: float = 0.0
    snapshot_sync_s: float = 0.0
    upload_wait_s: float = 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "restore_s": round(self.restore_s, 6),
            "snapshot_sync_s": round(self.snapshot_sync_s, 6),
            "upload_wait_s": round(self.upload_wait_s, 6),
        }


NOT_READY = "CHECKPOINT_DECLINED_TASK_NOT_READY"
"""The decline reason of a subtask that finished its input without taking the snapshot."""


def _alignment(alignment_ms: float | None) -> dict[str, float]:
    return {} if alignment_ms is None else {"alignment_ms": alignment_ms}


def _with_channel_state(
    handles: tuple[StateHandle, ...], snapshot: dict[str, Any], channel_state: ChannelStateRef | None
) -> tuple[tuple[StateHandle, ...], dict[str, Any]]:
    if channel_state is None:
        return handles, snapshot
    return (*handles, channel_state.handle), {**snapshot, **channel_state.snapshot_entry()}


@dataclass(frozen=True, slots=True)
class StateAck:
    """A stateful operator's subtask: the state files it wrote (or reused) for checkpoint n."""

    uid: str
    written: WrittenSnapshot
    timing: Timing
    alignment_ms: float | None
    operator_metrics: Mapping[str, Any]
    channel_state: ChannelStateRef | None = None
    memory: Mapping[str, Any] | None = None

    def record(self, site: AckSite) -> AckRecord:
        w = self.written
        handles, snapshot = _with_channel_state(tuple(w.handles), dict(w.snapshot), self.channel_state)
        metrics = {
            "bytes_written": w.bytes_written,
            "files_written": w.files_written,
            "state_files": len(w.handles),
            **self.timing.metrics(),
            **_alignment(self.alignment_ms),
            **(self.memory or {}),
            **self.operator_metrics,
        }
        return site.record(self.uid, handles, metrics, snapshot)

    def summary(self, subtask: int) -> dict[str, Any]:
        return {"uid": self.uid, "subtask": subtask, "bytes_written": self.written.bytes_written}


@dataclass(frozen=True, slots=True)
class SinkAck:
    """A sink's subtask: its pre-committed transaction of checkpoint n."""

    uid: str
    txn: PreCommittedTxn
    alignment_ms: float | None
    channel_state: ChannelStateRef | None = None
    in_job_store: bool = True
    """The txn's files are job-store keys (``TransactionalSink.stages_in_job_store``): listed as the
    ack's handles so completion verifies them; else (a Delta table's files) the sink verifies them."""
    memory: Mapping[str, Any] | None = None

    def record(self, site: AckSite) -> AckRecord:
        files = tuple(self.txn.files) if self.in_job_store else ()
        handles, snapshot = _with_channel_state(files, sink_snapshot([self.txn]), self.channel_state)
        metrics = {"rows": self.txn.rows, **_alignment(self.alignment_ms), **(self.memory or {})}
        return site.record(self.uid, handles, metrics, snapshot)


@dataclass(frozen=True, slots=True)
class SourceAck:
    """A source partition: where the next epoch starts reading, and its watermark state."""

    uid: str
    partition: str
    max_ts: int | None
    position: int
    records: int
    dead_letters: Mapping[str, int]
    """Dead letters of the epoch by reason (only reasons that occurred)."""
    memory: Mapping[str, Any] | None = None

    def record(self, site: AckSite) -> AckRecord:
        metrics = {
            "records": self.records,
            "dead_letters": sum(self.dead_letters.values()),
            **(self.memory or {}),
        }
        parts = TaskParts(SourcePart(self.partition, self.position, self.max_ts), dict(self.dead_letters))
        snapshot = parts.to_json()
        return site.record(self.uid, (), metrics, snapshot)
