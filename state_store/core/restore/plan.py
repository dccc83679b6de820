"""Restore planning: which state of a checkpoint/savepoint goes where in a new job version.

Pure (standard library only, no I/O, no clock). Given what the new job looks like
(:class:`JobShape`), what the snapshot contains (:class:`SnapshotShape`) and the user's
:class:`RestoreOptions`, :func:`plan_restore` decides, with Flink's savepoint restore semantics,
what happens to every operator and collects every reason the restore must be refused. It raises
nothing for a refusal (``plan.ok`` is False and ``plan.refusals`` lists one-line reasons;
:meth:`RestorePlan.raise_if_refused` turns them into a :class:`RestorePlanError`). Invalid input
(bad options, malformed shapes) raises :class:`RestorePlanError` at once with a one-line message.

What a plan guarantees
----------------------
* One row per job operator, in job order, then one per snapshot operator no job operator takes,
  in snapshot order; every row's action is one of :data:`ACTIONS`.
* ``plan.refusals`` is every row's refusals (in row order) after the job-level ones, so ``ok``
  (no refusals) means no state is lost without ``allow_non_restored_state``, no kind or schema
  breaks and max_parallelism is unchanged.
* For keyed state restored with an unchanged max_parallelism, :attr:`OperatorRow.subtasks` gives
  each new subtask a contiguous key-group range; together they cover every key group exactly once,
  in order, and each lists exactly the old subtasks owning part of its range.

Rules (Flink's ``Checkpoints.loadAndValidateCheckpoint`` / ``StateAssignmentOperation``)
-------------------------------------------------------------------------------------------
* Operators are matched by **uid**. ``uid_map`` (old uid -> new uid) renames snapshot operators
  first; an entry whose old uid is not in the snapshot or whose new uid is not in the job is
  refused, as are two snapshot operators landing on the same new uid.
* Job operator with no snapshot state: ``"new"`` (stateful, starts empty) or ``"stateless"``.
* Snapshot operator with state that no job operator takes: refused unless
  ``allow_non_restored_state`` (then ``"dropped"``). One without state: ``"removed"``, harmless.
* Matched stateful operator: ``"restore"`` (same parallelism) or ``"rescale"``. Keyed state is
  reassigned by key group: :attr:`OperatorRow.subtasks` lists the key-group range of every new
  subtask and the old subtasks whose ranges overlap it (the files it reads). Operator list state
  is redistributed like Flink's ``RoundRobinOperatorStateRepartitioner`` (a note says how).
* ``max_parallelism`` must not change: it fixes the key group of every key. Refused otherwise.
* Per state name: a kind change is refused; a snapshot state the new operator does not register
  is refused unless ``allow_non_restored_state`` (then dropped); a new state starts empty. With
  ``value_schemas`` on both sides: an added nullable field is fine (null in restored entries); a
  removed field, a type change, a field becoming non-nullable or an added non-nullable field is
  refused. A schema on one side only is not checked (a note says so).
* A snapshot of another ``job_id`` is refused unless ``allow_foreign``.
* ``RestoreOptions.parallelism`` overrides the parallelism of every operator of the new job.
* ``claim_mode`` is recorded with its meaning (:data:`CLAIM_MODES`).

JSON
----
:meth:`RestorePlan.to_json` writes the document ``epochal restore --json`` prints and the Airflow
restore operator returns; :func:`plan_from_json` reads it back (any ``format_version`` up to the
codec's). Both go through :mod:`state_store.core.codec`: the document is the plan's fields in
order (the snapshot nested under ``"snapshot"``, the rows under ``"operators"``), with
``format_version`` and ``ok`` first and ``claim_mode_meaning`` after ``claim_mode``. A subtask's
``key_groups`` is ``[first, last]`` (inclusive). Reading checks ``ok`` against the refusals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from state_store.core.codec import FORMAT_VERSION, UnsupportedFormatVersion, from_jsonable, to_jsonable
from state_store.core.keygroups import (
    KeyGroupRange,
    check_parallelism,
    key_group_range_for_subtask,
    subtask_for_key_group,
)
from state_store.core.restore.shapes import (
    CLAIM_MODES,
    KEYED_STATE_KINDS,
    OPERATOR_STATE_KINDS,
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlanError,
    SnapshotShape,
    check_one_of,
    snapshot_description,
)
from state_store.core.state.operator import OperatorStateMode

ACTIONS = ("restore", "rescale", "new", "stateless", "dropped", "removed")
"""Row actions: restore/rescale (state restored, same/changed parallelism), new (stateful, starts
empty), stateless (nothing to restore), dropped (snapshot state nobody takes; allowed only with
allow_non_restored_state), removed (snapshot operator without state that the job no longer has)."""


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubtaskAssignment:
    """Key groups of one new subtask and the old subtasks whose ranges overlap them (read on restore).

    ``key_groups`` is ``(first, last)``, both inclusive (its JSON form); :attr:`key_group_range`
    is the same range as a :class:`KeyGroupRange`.
    """

    subtask: int
    key_groups: tuple[int, ...]
    old_subtasks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.key_groups) != 2:
            raise RestorePlanError(
                f"subtask {self.subtask}: key_groups must be [first, last], got {self.key_groups!r}"
            )
        try:
            KeyGroupRange(*self.key_groups)
        except ValueError as exc:
            raise RestorePlanError(f"subtask {self.subtask}: {exc}") from None

    @property
    def key_group_range(self) -> KeyGroupRange:
        return KeyGroupRange(*self.key_groups)

    def __str__(self) -> str:
        olds = ", ".join(map(str, self.old_subtasks))
        plural = _s(self.old_subtasks)
        return f"subtask {self.subtask}: key groups {self.key_group_range} <- old subtask{plural} {olds}"


@dataclass(frozen=True, slots=True)
class OperatorRow:
    """What happens to one operator.

    ``uid`` is the job's uid (for dropped/removed rows: the snapshot's); ``old_uid`` the snapshot
    uid it restores from (None if none). ``states`` are restored, ``new_states`` start empty,
    ``dropped_states`` are in the snapshot but not taken. ``subtasks`` is filled for keyed state
    restored with equal max_parallelism. ``refusals`` are this operator's share of the plan's.
    """

    uid: str
    old_uid: str | None
    action: str
    old_parallelism: int | None
    new_parallelism: int | None
    states: tuple[str, ...] = ()
    new_states: tuple[str, ...] = ()
    dropped_states: tuple[str, ...] = ()
    subtasks: tuple[SubtaskAssignment, ...] = ()
    notes: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_one_of(self.action, ACTIONS, f"operator {self.uid!r}: action")

    @property
    def ok(self) -> bool:
        return not self.refusals


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    """The snapshot a plan restores (the ``"snapshot"`` object of the plan's JSON)."""

    job_id: str
    kind: str
    checkpoint_id: int | None
    location: str
    max_parallelism: int

    def describe(self) -> str:
        return snapshot_description(self.kind, self.checkpoint_id, self.location, self.job_id)


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """The outcome of :func:`plan_restore`: rows, refusals, notes; ``ok`` iff nothing was refused.

    The fields are the plan's JSON document in its order (module docstring); ``operators`` holds
    the rows (also :attr:`rows`).
    """

    job_id: str
    max_parallelism: int
    snapshot: PlanSnapshot
    claim_mode: str
    allow_non_restored_state: bool
    operators: tuple[OperatorRow, ...]
    refusals: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_one_of(self.claim_mode, CLAIM_MODES, "claim mode")

    @property
    def rows(self) -> tuple[OperatorRow, ...]:
        """One row per job operator, then one per snapshot operator no job operator takes."""
        return self.operators

    @property
    def ok(self) -> bool:
        return not self.refusals

    @property
    def claim_mode_meaning(self) -> str:
        return CLAIM_MODES[self.claim_mode]

    def row(self, uid: str) -> OperatorRow:
        """The row of ``uid`` (a job uid, or a snapshot uid for dropped/removed rows); KeyError if none."""
        for row in self.operators:
            if row.uid == uid:
                return row
        raise KeyError(uid)

    def summary(self) -> str:
        """One line: what is restored where, and whether it may proceed."""
        head = f"restore of {self.snapshot.describe()} into job {self.job_id!r}"
        if self.ok:
            return f"{head}: ok ({len(self.operators)} operator{_s(self.operators)})"
        return f"{head} refused: {len(self.refusals)} problem{_s(self.refusals)}"

    def raise_if_refused(self) -> None:
        """Raise :class:`RestorePlanError` (summary line, then one line per reason) unless ok."""
        if not self.ok:
            raise RestorePlanError("\n".join([self.summary(), *(f"  - {r}" for r in self.refusals)]))

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON object (module docstring); :func:`plan_from_json` reads it back."""
        document: dict[str, Any] = {"format_version": FORMAT_VERSION, "ok": self.ok}
        for key, value in to_jsonable(self).items():  # the fields, in order
            document[key] = value
            if key == "claim_mode":
                document["claim_mode_meaning"] = self.claim_mode_meaning
        return document


@dataclass(frozen=True, slots=True)
class _PlanHeader:
    """What :meth:`RestorePlan.to_json` writes beside the plan's fields, checked when read (the
    plan derives ``ok``; ``claim_mode_meaning`` is for people and not read back)."""

    format_version: int
    ok: bool
    refusals: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.format_version < 1:
            raise ValueError(f"format_version {self.format_version} is not a version")
        if self.ok != (not self.refusals):
            raise ValueError(f"'ok' is {str(self.ok).lower()} but it has {len(self.refusals)} refusals")


def plan_from_json(value: Any) -> RestorePlan:
    """Read a plan written by :meth:`RestorePlan.to_json`.

    A ``format_version`` newer than this Epochal's raises :class:`UnsupportedFormatVersion`; a
    missing or mistyped field, an unknown action or claim mode, or ``ok`` contradicting the
    refusals raises a one-line :class:`~state_store.core.codec.ManifestError`.
    """
    version = value.get("format_version") if isinstance(value, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise UnsupportedFormatVersion(
            f"restore plan has format_version {version}, newer than this Epochal supports "
            f"({FORMAT_VERSION}): upgrade Epochal to read it"
        )
    plan = from_jsonable(RestorePlan, value, what="restore plan")
    from_jsonable(_PlanHeader, value, what="restore plan")
    return plan


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


def key_group_assignment(
    max_parallelism: int, old_parallelism: int, new_parallelism: int
) -> tuple[SubtaskAssignment, ...]:
    """Key-group range of every new subtask and the old subtasks owning part of it (Flink's ranges)."""
    check_parallelism(max_parallelism, old_parallelism)
    check_parallelism(max_parallelism, new_parallelism)
    out = []
    for subtask in range(new_parallelism):
        groups = key_group_range_for_subtask(max_parallelism, new_parallelism, subtask)
        first_old = subtask_for_key_group(max_parallelism, old_parallelism, groups.first)
        last_old = subtask_for_key_group(max_parallelism, old_parallelism, groups.last)
        out.append(
            SubtaskAssignment(subtask, (groups.first, groups.last), tuple(range(first_old, last_old + 1)))
        )
    return tuple(out)


def plan_restore(job: JobShape, snapshot: SnapshotShape, options: RestoreOptions) -> RestorePlan:
    """Plan restoring ``snapshot`` into ``job`` (see module docstring); refusals are collected."""
    if not isinstance(job, JobShape) or not isinstance(snapshot, SnapshotShape):
        raise RestorePlanError("plan_restore needs a JobShape and a SnapshotShape")
    if not isinstance(options, RestoreOptions):
        raise RestorePlanError("plan_restore needs RestoreOptions")
    if options.parallelism is not None and options.parallelism > job.max_parallelism:
        raise RestorePlanError(
            f"parallelism {options.parallelism} exceeds max_parallelism {job.max_parallelism}: "
            "a subtask needs at least one key group; lower the parallelism"
        )

    refusals: list[str] = []
    notes: list[str] = []
    if snapshot.job_id != job.job_id:
        if options.allow_foreign:
            notes.append(f"restoring a snapshot of another job ({snapshot.job_id!r}) with allow_foreign")
        else:
            refusals.append(
                f"the {snapshot.describe()} belongs to another job than {job.job_id!r}; "
                "pass allow_foreign to restore it anyway"
            )
    same_max_p = snapshot.max_parallelism == job.max_parallelism
    if not same_max_p:
        refusals.append(
            f"max_parallelism changed from {snapshot.max_parallelism} (snapshot) to {job.max_parallelism} "
            f"(job): key groups would move; keep max_parallelism={snapshot.max_parallelism} in the job"
        )

    job_ops = {op.uid: op for op in job.operators}
    snap_ops = {op.uid: op for op in snapshot.operators}

    # uid mapping: snapshot uid -> the job uid it restores into.
    bad_map: set[str] = set()
    for old, new in options.uid_map.items():
        if old not in snap_ops:
            refusals.append(f"uid_map entry {old!r} -> {new!r}: {old!r} is not an operator of the snapshot")
        elif new not in job_ops:
            refusals.append(f"uid_map entry {old!r} -> {new!r}: {new!r} is not an operator of the job")
            bad_map.add(old)
    target: dict[str, str] = {}
    for op in snapshot.operators:
        if op.uid in bad_map:
            continue
        target[op.uid] = options.uid_map.get(op.uid, op.uid)
    sources: dict[str, list[str]] = {}
    for old_uid, new_uid in target.items():
        sources.setdefault(new_uid, []).append(old_uid)
    matched: dict[str, str] = {}  # job uid -> snapshot uid
    clashing: set[str] = set()
    for new_uid, olds in sources.items():
        if new_uid not in job_ops:
            continue
        if len(olds) > 1:
            winner = new_uid if new_uid in olds else olds[0]
            refusals.append(
                f"uid_map: snapshot operators {', '.join(map(repr, olds))} would all restore into "
                f"{new_uid!r}; map at most one snapshot uid to each job uid"
            )
            clashing.update(o for o in olds if o != winner)
            matched[new_uid] = winner
        else:
            matched[new_uid] = olds[0]

    p_override = options.parallelism
    rows: list[OperatorRow] = []
    for op in job.operators:
        new_p = p_override if p_override is not None else op.parallelism
        source = snap_ops.get(matched[op.uid]) if op.uid in matched else None
        rows.append(_plan_operator(op, source, new_p, snapshot.max_parallelism, same_max_p, options))
    taken = set(matched.values())
    for snap_op in snapshot.operators:
        if snap_op.uid in taken:
            continue
        rows.append(_plan_unmatched(snap_op, snap_op.uid in bad_map or snap_op.uid in clashing, options))
    for row in rows:
        refusals.extend(row.refusals)
    return RestorePlan(
        job_id=job.job_id,
        max_parallelism=job.max_parallelism,
        snapshot=PlanSnapshot(
            snapshot.job_id,
            snapshot.kind,
            snapshot.checkpoint_id,
            snapshot.location,
            snapshot.max_parallelism,
        ),
        claim_mode=options.claim_mode,
        allow_non_restored_state=options.allow_non_restored_state,
        operators=tuple(rows),
        refusals=tuple(refusals),
        notes=tuple(notes),
    )


def _plan_unmatched(op: OperatorShape, already_refused: bool, options: RestoreOptions) -> OperatorRow:
    """A snapshot operator that no job operator takes."""
    if not op.has_state:
        return OperatorRow(
            op.uid, op.uid, "removed", op.parallelism, None, notes=("no state in the snapshot; nothing lost",)
        )
    names = tuple(op.states)
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if already_refused:
        notes = ("not restored: see the uid_map refusal",)
    elif options.allow_non_restored_state:
        notes = (f"state {_names(names)} not restored (allow_non_restored_state)",)
    else:
        refusals = (
            f"operator {op.uid!r} of the snapshot has state {_names(names)} that no operator of the job "
            "takes; map its uid with uid_map or pass allow_non_restored_state to drop it",
        )
    return OperatorRow(
        op.uid, op.uid, "dropped", op.parallelism, None, dropped_states=names, notes=notes, refusals=refusals
    )


def _plan_operator(
    op: OperatorShape,
    old: OperatorShape | None,
    new_p: int,
    max_parallelism: int,
    same_max_p: bool,
    options: RestoreOptions,
) -> OperatorRow:
    """A job operator, with the snapshot operator it restores from (if any)."""
    old_uid = old.uid if old is not None else None
    old_p = old.parallelism if old is not None else None
    renamed = (f"restores from snapshot uid {old_uid!r} (uid_map)",) if old_uid not in (None, op.uid) else ()
    if old is None or not old.has_state:
        if not op.stateful:
            return OperatorRow(op.uid, old_uid, "stateless", old_p, new_p, notes=renamed)
        why = "not in the snapshot" if old is None else "no state in the snapshot"
        return OperatorRow(
            op.uid,
            old_uid,
            "new",
            old_p,
            new_p,
            new_states=tuple(op.states),
            notes=(*renamed, f"{why}; starts empty"),
        )
    assert old_p is not None
    where = f"operator {op.uid!r}"
    notes = list(renamed)
    refusals: list[str] = []
    restored: list[str] = []
    dropped: list[str] = []
    for name, old_kind in old.states.items():
        new_kind = op.states.get(name)
        if new_kind is None:
            dropped.append(name)
            if options.allow_non_restored_state:
                notes.append(f"state {name!r} ({old_kind}) not restored (allow_non_restored_state)")
            else:
                refusals.append(
                    f"{where}: state {name!r} ({old_kind}) is in the snapshot but not registered by the new "
                    "operator; register it or pass allow_non_restored_state to drop it"
                )
            continue
        restored.append(name)
        if new_kind != old_kind:
            refusals.append(
                f"{where}: state {name!r} changed kind from {old_kind} to {new_kind}: incompatible; "
                "keep the kind or use a new state name"
            )
            continue
        refusals.extend(_schema_refusals(where, name, old, op, notes))
        mode = OPERATOR_STATE_KINDS.get(old_kind)
        if mode is not None:
            notes.append(_operator_state_note(name, mode, old_p, new_p))
    new_states = tuple(name for name in op.states if name not in old.states)
    if new_states:
        notes.append(f"new state {_names(new_states)} starts empty")
    subtasks: tuple[SubtaskAssignment, ...] = ()
    keyed_restored = any(old.states[n] in KEYED_STATE_KINDS for n in restored)
    if keyed_restored and same_max_p:
        subtasks = key_group_assignment(max_parallelism, old_p, new_p)
    action = "rescale" if old_p != new_p else "restore"
    if not op.stateful:
        action = "stateless"
    if old_p != new_p and keyed_restored:
        notes.append(
            f"keyed state rescaled {old_p} -> {new_p} by key group"
            + ("" if same_max_p else " (not planned: max_parallelism changed)")
        )
    return OperatorRow(
        op.uid,
        old_uid,
        action,
        old_p,
        new_p,
        states=tuple(restored),
        new_states=new_states,
        dropped_states=tuple(dropped),
        subtasks=subtasks,
        notes=tuple(notes),
        refusals=tuple(refusals),
    )


def _schema_refusals(
    where: str, name: str, old: OperatorShape, new: OperatorShape, notes: list[str]
) -> list[str]:
    """Compare the value schemas of one state; notes get the allowed changes."""
    old_fields, new_fields = old.value_schemas.get(name), new.value_schemas.get(name)
    if old_fields is None and new_fields is None:
        return []
    if old_fields is None or new_fields is None:
        side = "snapshot" if old_fields is None else "new operator"
        notes.append(f"state {name!r}: no value schema in the {side}; schema compatibility not checked")
        return []
    refusals = []
    prefix = f"{where}: state {name!r} field"
    for fname, old_t in old_fields.items():
        new_t = new_fields.get(fname)
        if new_t is None:
            refusals.append(f"{prefix} {fname!r} ({old_t}) was removed: incompatible")
        elif new_t.type != old_t.type:
            refusals.append(
                f"{prefix} {fname!r} changed type from {old_t.type} to {new_t.type}: incompatible"
            )
        elif old_t.nullable and not new_t.nullable:
            refusals.append(f"{prefix} {fname!r} became non-nullable: restored nulls would violate it")
    for fname, new_t in new_fields.items():
        if fname in old_fields:
            continue
        if new_t.nullable:
            notes.append(
                f"state {name!r}: added nullable field {fname!r} ({new_t.type}) is null when restored"
            )
        else:
            refusals.append(
                f"{prefix} {fname!r} ({new_t.type}) was added as non-nullable: restored entries have no "
                "value for it; make it nullable"
            )
    return refusals


def _operator_state_note(name: str, mode: OperatorStateMode, old_p: int, new_p: int) -> str:
    if mode is OperatorStateMode.UNION:
        return (
            f"operator state {name!r} (union): every one of the {new_p} new subtasks gets all elements of "
            f"the {old_p} old subtask{'s' if old_p != 1 else ''}, in old subtask order"
        )
    if old_p == new_p:
        return (
            f"operator state {name!r} (split-distribute): each subtask keeps its own list (same parallelism)"
        )
    return (
        f"operator state {name!r} (split-distribute, Flink round-robin): the lists of the {old_p} old "
        f"subtask{'s' if old_p != 1 else ''} are concatenated in subtask order and cut into {new_p} "
        f"contiguous chunks, the first (total % {new_p}) one element longer"
    )


def _s(items: Iterable[object] | int) -> str:
    count = items if isinstance(items, int) else len(list(items))
    return "" if count == 1 else "s"


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)
