"""Restore planning (pure: standard library only): which state of a snapshot goes where.

* :mod:`~state_store.core.restore.shapes` -- the inputs (:class:`JobShape`, :class:`SnapshotShape`,
  :class:`RestoreOptions`), each validated when built.
* :mod:`~state_store.core.restore.plan` -- :func:`plan_restore` and the :class:`RestorePlan` it
  returns (Flink's savepoint restore rules, and what a plan guarantees), with its JSON form.

Rendering a plan for people (the ``epochal restore --dry-run`` table) is presentation and lives
outside the core, in ``spark_jobs.lifecycle.restore_render``.
"""

from state_store.core.restore.plan import (
    ACTIONS,
    OperatorRow,
    PlanSnapshot,
    RestorePlan,
    SubtaskAssignment,
    key_group_assignment,
    plan_from_json,
    plan_restore,
)
from state_store.core.restore.shapes import (
    CLAIM_MODES,
    KEYED_STATE_KINDS,
    OPERATOR_STATE_KINDS,
    SNAPSHOT_KINDS,
    FieldType,
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlanError,
    SnapshotShape,
)

__all__ = [
    "ACTIONS",
    "CLAIM_MODES",
    "KEYED_STATE_KINDS",
    "OPERATOR_STATE_KINDS",
    "SNAPSHOT_KINDS",
    "FieldType",
    "JobShape",
    "OperatorRow",
    "OperatorShape",
    "PlanSnapshot",
    "RestoreOptions",
    "RestorePlan",
    "RestorePlanError",
    "SnapshotShape",
    "SubtaskAssignment",
    "key_group_assignment",
    "plan_from_json",
    "plan_restore",
]
