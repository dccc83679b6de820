"""The checkpoint statistics model (Flink's web UI checkpoint tab), as plain values.

Everything here is computed from protocol documents already read from storage; nothing is kept
anywhere else, so the numbers are the same after a scheduler restart, a new Airflow database or a
move to another Airflow. Invariants:

* ``CheckpointRow.status`` is one of :data:`STATUSES`; a row is ``completed`` iff its checkpoint has a
  ``_metadata.json`` (the commit point), ``failed`` iff its decision is ABORT, ``in_progress`` iff no
  decision exists, ``completing`` iff it was decided COMPLETE but ``_metadata.json`` is not written yet.
* ``Overview`` counts add up: ``triggered == in_progress + completing + completed + failed + unreadable``
  over the checkpoints in the history: those still in storage plus those whose rows the history
  archive kept after retention deleted their folders (``state_store.monitoring.archive``);
  ``highest_id`` is the id high-water mark, which retention never removes.
* ``SummaryStats`` uses nearest-rank percentiles over completed checkpoints only: ``p50``/``p99`` are
  values that occurred, and ``min <= p50 <= p99 <= max``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from state_store.core.status import CheckpointStatus

STATUSES = tuple(
    s.label()
    for s in (
        CheckpointStatus.COMPLETED,
        CheckpointStatus.ABORTED,
        CheckpointStatus.IN_PROGRESS,
        CheckpointStatus.COMPLETING,
        CheckpointStatus.UNREADABLE,
    )
)
"""The words of :class:`~state_store.core.status.CheckpointStatus` the view shows (``failed`` for ABORTED)."""


def as_json(value: Any) -> dict[str, Any]:
    """A row's JSON: its fields, then the properties its class lists in ``COMPUTED`` (dicts copied).
    The REST API's schema (``epochal_airflow.ui.schemas``) is built from the same fields, their
    ``metadata`` (``doc``, bounds) and those properties, so the two cannot drift apart."""
    names = [f.name for f in fields(value)] + list(getattr(value, "COMPUTED", ()))
    return {n: dict(v) if isinstance(v := getattr(value, n), dict) else v for n in names}


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """One line of the history table.

    ``state_size``: bytes of every state file the checkpoint references (checkpointed size).
    ``incremental_size``: bytes uploaded by this checkpoint (the acks' ``bytes_written``; a reused
    incremental file costs nothing). ``alignment_ms``: the longest barrier alignment a subtask
    reported (None when no subtask reports ``alignment_ms``). ``run_id``: the Airflow DAG run that
    triggered the checkpoint (the trigger's ``request_id``), "" when triggered outside Airflow.
    ``validation``: ``passed``, ``failed``, ``quarantined`` or ``not_run``.
    """

    checkpoint_id: int = field(metadata={"ge": 1})
    status: str = field(metadata={"doc": " | ".join(STATUSES)})
    trigger_ms: int
    end_ms: int | None
    acked: int = field(metadata={"ge": 0})
    expected: int = field(metadata={"ge": 0})
    state_size: int = field(metadata={"ge": 0, "doc": "bytes of every state file the checkpoint references"})
    incremental_size: int = field(metadata={"ge": 0, "doc": "bytes uploaded by this checkpoint"})
    alignment_ms: int | None
    savepoint: bool
    generation: int
    run_id: str = field(metadata={"doc": "the Airflow DAG run that triggered it ('' outside Airflow)"})
    validation: str = field(metadata={"doc": "passed | failed | quarantined | not_run"})
    validation_detail: str = ""
    reason: str = ""
    restored_from: str = ""

    #: properties that ``to_json`` adds to the fields (the REST schema takes them from here too)
    COMPUTED: ClassVar[tuple[str, ...]] = ("duration_ms",)

    @property
    def duration_ms(self) -> int | None:
        """end-to-end: trigger to completion or abort. None when the end precedes the trigger
        (decided on another clock): never negative."""
        if self.end_ms is None or self.end_ms < self.trigger_ms:
            return None
        return self.end_ms - self.trigger_ms

    def to_json(self) -> dict[str, Any]:
        return as_json(self)


@dataclass(frozen=True, slots=True)
class SummaryStats:
    """min/avg/p50/p99/max of one quantity over ``count`` values (all None when count is 0)."""

    count: int
    min: float | None
    avg: float | None
    p50: float | None
    p99: float | None
    max: float | None

    def to_json(self) -> dict[str, Any]:
        return as_json(self)


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence (0 < p <= 100)."""
    if not ordered:
        raise ValueError("percentile of no values is undefined: pass at least one value")
    if not 0 < p <= 100:
        raise ValueError(f"percentile p={p} is invalid: use 0 < p <= 100")
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(values: Sequence[float]) -> SummaryStats:
    if not values:
        return SummaryStats(0, None, None, None, None, None)
    ordered = sorted(values)
    return SummaryStats(
        count=len(ordered),
        min=ordered[0],
        avg=sum(ordered) / len(ordered),
        p50=percentile(ordered, 50),
        p99=percentile(ordered, 99),
        max=ordered[-1],
    )


@dataclass(frozen=True, slots=True)
class Overview:
    """Counts and the latest notable checkpoints of one job (see the module invariants)."""

    job_id: str
    triggered: int
    in_progress: int
    completing: int
    completed: int
    failed: int
    unreadable: int
    restored: int
    highest_id: int
    generation: int
    latest_completed: CheckpointRow | None
    latest_savepoint: CheckpointRow | None
    latest_failure: CheckpointRow | None
    latest_restore: CheckpointRow | None

    def to_json(self) -> dict[str, Any]:
        def row(r: CheckpointRow | None) -> dict[str, Any] | None:
            return None if r is None else r.to_json()

        return {
            "job_id": self.job_id,
            "counts": {
                "triggered": self.triggered,
                "in_progress": self.in_progress,
                "completing": self.completing,
                "completed": self.completed,
                "failed": self.failed,
                "unreadable": self.unreadable,
                "restored": self.restored,
            },
            "highest_id": self.highest_id,
            "generation": self.generation,
            "latest_completed": row(self.latest_completed),
            "latest_savepoint": row(self.latest_savepoint),
            "latest_failure": row(self.latest_failure),
            "latest_restore": row(self.latest_restore),
        }


def build_overview(job_id: str, rows: Sequence[CheckpointRow], generation: int) -> Overview:
    """Counts and latest entries of ``rows`` (ascending by id)."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in rows:
        counts[r.status] += 1

    def latest(pred: Any) -> CheckpointRow | None:
        return next((r for r in reversed(rows) if pred(r)), None)

    return Overview(
        job_id=job_id,
        triggered=len(rows),
        in_progress=counts["in_progress"],
        completing=counts["completing"],
        completed=counts["completed"],
        failed=counts["failed"],
        unreadable=counts["unreadable"],
        restored=sum(1 for r in rows if r.restored_from),
        highest_id=rows[-1].checkpoint_id if rows else 0,
        generation=generation,
        latest_completed=latest(lambda r: r.status == "completed" and not r.savepoint),
        latest_savepoint=latest(lambda r: r.status == "completed" and r.savepoint),
        latest_failure=latest(lambda r: r.status == "failed"),
        latest_restore=latest(lambda r: bool(r.restored_from)),
    )


@dataclass(frozen=True, slots=True)
class SubtaskDetail:
    """One acknowledgement (or missing/declined one) of one operator subtask."""

    subtask: int
    status: str = field(metadata={"doc": "acked | declined | pending"})
    attempt: int
    state_size: int
    bytes_written: int
    files: int
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return as_json(self)


@dataclass(frozen=True, slots=True)
class OperatorDetail:
    uid: str
    subtasks: tuple[SubtaskDetail, ...]

    @property
    def acked(self) -> int:
        return sum(1 for s in self.subtasks if s.status == "acked")

    @property
    def state_size(self) -> int:
        return sum(s.state_size for s in self.subtasks)

    @property
    def bytes_written(self) -> int:
        return sum(s.bytes_written for s in self.subtasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "acked": self.acked,
            "expected": len(self.subtasks),
            "state_size": self.state_size,
            "bytes_written": self.bytes_written,
            "subtasks": [s.to_json() for s in self.subtasks],
        }


@dataclass(frozen=True, slots=True)
class CheckpointDetail:
    row: CheckpointRow
    attempt: int
    operators: tuple[OperatorDetail, ...]
    positions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.row.to_json(),
            "attempt": self.attempt,
            "operators": [o.to_json() for o in self.operators],
            "positions": self.positions,
        }
