"""Restore planning: which state of a checkpoint/savepoint goes where in a new job version.

Pure (standard library only, no I/O, no clock). Given what the new job looks like
(:class:`JobShape`), what the snapshot contains (:class:`SnapshotShape`) and the user's
:class:`RestoreOptions`, :func:`plan_restore` decides, with Flink's savepoint restore semantics,
what happens to every operator and collects every reason the restore must be refused. It raises
nothing for a refusal (``plan.ok`` is False and ``plan.refusals`` lists one-line reasons;
:meth:`RestorePlan.raise_if_refused` turns them into a :class:`RestorePlanError`). Invalid input
(bad options, malformed shapes) raises :class:`RestorePlanError` at once with a one-line message.

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

State kinds are strings: the keyed kinds are the :class:`StateKind` values (``"value"``,
``"list"``, ``"map"``, ``"reducing"``, ``"aggregating"``); ``"operator_list"`` is a
split-distribute operator list and ``"union_list"`` a union operator list; any other non-empty
kind (e.g. ``"timers"``) is accepted and only compared for equality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from state_store.core.keygroups import (
    KeyGroupRange,
    check_max_parallelism,
    check_parallelism,
    key_group_range_for_subtask,
    subtask_for_key_group,
)
from state_store.core.state.descriptors import StateKind
from state_store.core.state.operator import OperatorStateMode

FORMAT_VERSION = 1

KEYED_STATE_KINDS = frozenset(kind.value for kind in StateKind)
"""Kinds of keyed state (partitioned into key groups)."""

OPERATOR_STATE_KINDS: Mapping[str, OperatorStateMode] = MappingProxyType(
    {"operator_list": OperatorStateMode.SPLIT_DISTRIBUTE, "union_list": OperatorStateMode.UNION}
)
"""Kinds of operator (non-keyed) list state and how each is redistributed on rescale."""

SNAPSHOT_KINDS = ("checkpoint", "savepoint")

CLAIM_MODES: Mapping[str, str] = MappingProxyType(
    {
        "CLAIM": (
            "the job takes ownership of the snapshot's files: later checkpoints may share them and "
            "retention may delete them once they are no longer referenced"
        ),
        "NO_CLAIM": (
            "the snapshot is never modified or deleted: the first checkpoint after restore is a full "
            "one that shares no files with it"
        ),
    }
)
"""Restore modes (Flink's ``RestoreMode``) and what each means for the snapshot's files."""

ACTIONS = ("restore", "rescale", "new", "stateless", "dropped", "removed")
"""Row actions: restore/rescale (state restored, same/changed parallelism), new (stateful, starts
empty), stateless (nothing to restore), dropped (snapshot state nobody takes; allowed only with
allow_non_restored_state), removed (snapshot operator without state that the job no longer has)."""

_TABLE_SUBTASK_LIMIT = 16


class RestorePlanError(ValueError):
    """Invalid restore input, or (from :meth:`RestorePlan.raise_if_refused`) a refused restore."""


# --------------------------------------------------------------------------------------------
# Input shapes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldType:
    """One field of a state's value schema: its type name and whether it may be null."""

    type: str
    nullable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise RestorePlanError(f"field type must be a non-empty string, got {self.type!r}")
        if not isinstance(self.nullable, bool):
            raise RestorePlanError(f"field nullable must be a bool, got {self.nullable!r}")

    def __str__(self) -> str:
        return f"{self.type}{' (nullable)' if self.nullable else ' (not null)'}"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "nullable": self.nullable}

    @classmethod
    def from_json(cls, value: Any) -> FieldType:
        obj = _obj(value, "field type")
        nullable = obj.get("nullable", False)
        if not isinstance(nullable, bool):
            raise RestorePlanError(f"field type 'nullable' must be a bool, got {nullable!r}")
        return cls(_str(obj, "type", "field type"), nullable)


@dataclass(frozen=True, slots=True)
class OperatorShape:
    """One operator as a job declares it or as a snapshot holds it.

    ``states`` maps state name -> kind (see module docstring); ``value_schemas`` optionally maps a
    state name -> {field -> :class:`FieldType`} (plain ``{"type", "nullable"}`` dicts are accepted).
    For a snapshot, ``parallelism`` is the parallelism it was taken with and ``states`` the states
    found in it. Both mappings are frozen and sorted by name.
    """

    uid: str
    stateful: bool
    keyed: bool
    parallelism: int
    states: Mapping[str, str] = field(default_factory=dict)
    value_schemas: Mapping[str, Mapping[str, FieldType]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"operator {self.uid!r}"
        if not isinstance(self.uid, str) or not self.uid:
            raise RestorePlanError(f"operator uid must be a non-empty string, got {self.uid!r}")
        for name in ("stateful", "keyed"):
            if not isinstance(getattr(self, name), bool):
                raise RestorePlanError(f"{where}: {name} must be a bool, got {getattr(self, name)!r}")
        if not _is_int(self.parallelism) or self.parallelism < 1:
            raise RestorePlanError(f"{where}: parallelism must be a positive int, got {self.parallelism!r}")
        if not isinstance(self.states, Mapping):
            raise RestorePlanError(f"{where}: states must be a mapping of name -> kind")
        states: dict[str, str] = {}
        for name, kind in sorted(self.states.items()):
            if not isinstance(name, str) or not name:
                raise RestorePlanError(f"{where}: state names must be non-empty strings, got {name!r}")
            if not isinstance(kind, str) or not kind:
                raise RestorePlanError(f"{where}: kind of state {name!r} must be a non-empty string")
            if kind in KEYED_STATE_KINDS and not self.keyed:
                raise RestorePlanError(
                    f"{where}: state {name!r} is keyed ({kind}) but the operator is not keyed"
                )
            states[name] = kind
        if states and not self.stateful:
            raise RestorePlanError(f"{where}: declared stateless but has states {sorted(states)}")
        if not isinstance(self.value_schemas, Mapping):
            raise RestorePlanError(f"{where}: value_schemas must be a mapping of state -> fields")
        schemas: dict[str, Mapping[str, FieldType]] = {}
        for name, fields in sorted(self.value_schemas.items()):
            if name not in states:
                raise RestorePlanError(f"{where}: value schema given for unknown state {name!r}")
            if not isinstance(fields, Mapping):
                raise RestorePlanError(f"{where}: value schema of state {name!r} must be a mapping")
            converted: dict[str, FieldType] = {}
            for fname, ftype in sorted(fields.items()):
                if not isinstance(fname, str) or not fname:
                    raise RestorePlanError(f"{where}: state {name!r} has a field name {fname!r}")
                converted[fname] = ftype if isinstance(ftype, FieldType) else FieldType.from_json(ftype)
            schemas[name] = MappingProxyType(converted)
        object.__setattr__(self, "states", MappingProxyType(states))
        object.__setattr__(self, "value_schemas", MappingProxyType(schemas))

    @property
    def has_state(self) -> bool:
        return bool(self.states)

    @property
    def has_keyed_state(self) -> bool:
        return any(kind in KEYED_STATE_KINDS for kind in self.states.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "stateful": self.stateful,
            "keyed": self.keyed,
            "parallelism": self.parallelism,
            "states": dict(self.states),
            "value_schemas": {
                name: {f: t.to_json() for f, t in fields.items()}
                for name, fields in self.value_schemas.items()
            },
        }

    @classmethod
    def from_json(cls, value: Any) -> OperatorShape:
        obj = _obj(value, "operator")
        what = f"operator {obj.get('uid')!r}"
        schemas = _obj(obj.get("value_schemas", {}), f"{what} value_schemas")
        return cls(
            uid=_str(obj, "uid", "operator"),
            stateful=_bool(obj, "stateful", what),
            keyed=_bool(obj, "keyed", what),
            parallelism=_int(obj, "parallelism", what),
            states=dict(_obj(obj.get("states", {}), f"{what} states")),
            value_schemas={
                name: {f: FieldType.from_json(t) for f, t in _obj(fields, f"{what} schema {name!r}").items()}
                for name, fields in schemas.items()
            },
        )


def _check_operators(operators: Iterable[OperatorShape], max_parallelism: int, what: str) -> None:
    seen: set[str] = set()
    for op in operators:
        if not isinstance(op, OperatorShape):
            raise RestorePlanError(f"{what}: operators must be OperatorShape values, got {op!r}")
        if op.uid in seen:
            raise RestorePlanError(f"{what}: duplicate operator uid {op.uid!r}")
        seen.add(op.uid)
        if op.parallelism > max_parallelism:
            raise RestorePlanError(
                f"{what}: operator {op.uid!r} has parallelism {op.parallelism} > max_parallelism "
                f"{max_parallelism}"
            )


def _check_max_p(value: int, what: str) -> None:
    try:
        check_max_parallelism(value)
    except ValueError as exc:
        raise RestorePlanError(f"{what}: {exc}") from None


@dataclass(frozen=True, slots=True)
class JobShape:
    """What the new job version looks like."""

    job_id: str
    max_parallelism: int
    operators: tuple[OperatorShape, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise RestorePlanError(f"job_id must be a non-empty string, got {self.job_id!r}")
        _check_max_p(self.max_parallelism, f"job {self.job_id!r}")
        object.__setattr__(self, "operators", tuple(self.operators))
        _check_operators(self.operators, self.max_parallelism, f"job {self.job_id!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "max_parallelism": self.max_parallelism,
            "operators": [op.to_json() for op in self.operators],
        }

    @classmethod
    def from_json(cls, value: Any) -> JobShape:
        obj = _obj(value, "job")
        return cls(
            job_id=_str(obj, "job_id", "job"),
            max_parallelism=_int(obj, "max_parallelism", "job"),
            operators=tuple(OperatorShape.from_json(op) for op in _list(obj, "operators", "job")),
        )


@dataclass(frozen=True, slots=True)
class SnapshotShape:
    """What a checkpoint or savepoint contains: per operator its parallelism and the states found."""

    job_id: str
    max_parallelism: int
    kind: str
    checkpoint_id: int | None
    location: str
    operators: tuple[OperatorShape, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise RestorePlanError(f"snapshot job_id must be a non-empty string, got {self.job_id!r}")
        if self.kind not in SNAPSHOT_KINDS:
            raise RestorePlanError(
                f"snapshot kind must be one of {', '.join(SNAPSHOT_KINDS)}, got {self.kind!r}"
            )
        if self.checkpoint_id is not None and (not _is_int(self.checkpoint_id) or self.checkpoint_id < 0):
            raise RestorePlanError(f"checkpoint_id must be a non-negative int, got {self.checkpoint_id!r}")
        if self.kind == "checkpoint" and self.checkpoint_id is None:
            raise RestorePlanError("a checkpoint snapshot needs its checkpoint_id")
        if not isinstance(self.location, str):
            raise RestorePlanError(f"snapshot location must be a string, got {self.location!r}")
        _check_max_p(self.max_parallelism, f"snapshot {self.location!r}")
        object.__setattr__(self, "operators", tuple(self.operators))
        _check_operators(self.operators, self.max_parallelism, f"snapshot {self.location!r}")

    def describe(self) -> str:
        cid = "" if self.checkpoint_id is None else f" {self.checkpoint_id}"
        where = f" at {self.location}" if self.location else ""
        return f"{self.kind}{cid}{where} of job {self.job_id!r}"

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "max_parallelism": self.max_parallelism,
            "kind": self.kind,
            "checkpoint_id": self.checkpoint_id,
            "location": self.location,
            "operators": [op.to_json() for op in self.operators],
        }

    @classmethod
    def from_json(cls, value: Any) -> SnapshotShape:
        obj = _obj(value, "snapshot")
        return cls(
            job_id=_str(obj, "job_id", "snapshot"),
            max_parallelism=_int(obj, "max_parallelism", "snapshot"),
            kind=_str(obj, "kind", "snapshot"),
            checkpoint_id=_opt_int(obj, "checkpoint_id", "snapshot"),
            location=_str(obj, "location", "snapshot"),
            operators=tuple(OperatorShape.from_json(op) for op in _list(obj, "operators", "snapshot")),
        )


@dataclass(frozen=True, slots=True)
class RestoreOptions:
    """User choices for a restore (``epochal restore`` flags).

    ``parallelism`` (if given) overrides the parallelism of every operator of the new job; it is
    checked against the job's max_parallelism by :func:`plan_restore`.
    """

    allow_non_restored_state: bool = False
    uid_map: Mapping[str, str] = field(default_factory=dict)
    parallelism: int | None = None
    claim_mode: str = "NO_CLAIM"
    allow_foreign: bool = False

    def __post_init__(self) -> None:
        for name in ("allow_non_restored_state", "allow_foreign"):
            if not isinstance(getattr(self, name), bool):
                raise RestorePlanError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.parallelism is not None and (not _is_int(self.parallelism) or self.parallelism < 1):
            raise RestorePlanError(f"parallelism must be a positive int, got {self.parallelism!r}")
        if self.claim_mode not in CLAIM_MODES:
            raise RestorePlanError(
                f"unknown claim mode {self.claim_mode!r}: use one of {', '.join(CLAIM_MODES)}"
            )
        if not isinstance(self.uid_map, Mapping):
            raise RestorePlanError("uid_map must be a mapping of old uid -> new uid")
        for old, new in self.uid_map.items():
            if not isinstance(old, str) or not old or not isinstance(new, str) or not new:
                raise RestorePlanError(
                    f"uid_map entry {old!r} -> {new!r}: both uids must be non-empty strings"
                )
        object.__setattr__(self, "uid_map", MappingProxyType(dict(sorted(self.uid_map.items()))))

    def to_json(self) -> dict[str, Any]:
        return {
            "allow_non_restored_state": self.allow_non_restored_state,
            "uid_map": dict(self.uid_map),
            "parallelism": self.parallelism,
            "claim_mode": self.claim_mode,
            "allow_foreign": self.allow_foreign,
        }

    @classmethod
    def from_json(cls, value: Any) -> RestoreOptions:
        obj = _obj(value, "restore options")
        return cls(
            allow_non_restored_state=_bool(obj, "allow_non_restored_state", "restore options", False),
            uid_map=dict(_obj(obj.get("uid_map", {}), "restore options uid_map")),
            parallelism=_opt_int(obj, "parallelism", "restore options"),
            claim_mode=_str(obj, "claim_mode", "restore options", "NO_CLAIM"),
            allow_foreign=_bool(obj, "allow_foreign", "restore options", False),
        )


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubtaskAssignment:
    """Key groups of one new subtask and the old subtasks whose ranges overlap them (read on restore)."""

    subtask: int
    key_groups: KeyGroupRange
    old_subtasks: tuple[int, ...]

    def __str__(self) -> str:
        olds = ", ".join(map(str, self.old_subtasks))
        plural = _s(self.old_subtasks)
        return f"subtask {self.subtask}: key groups {self.key_groups} <- old subtask{plural} {olds}"

    def to_json(self) -> dict[str, Any]:
        return {
            "subtask": self.subtask,
            "key_groups": [self.key_groups.first, self.key_groups.last],
            "old_subtasks": list(self.old_subtasks),
        }

    @classmethod
    def from_json(cls, value: Any) -> SubtaskAssignment:
        obj = _obj(value, "subtask assignment")
        groups = _list(obj, "key_groups", "subtask assignment")
        if len(groups) != 2 or not all(_is_int(g) for g in groups):
            raise RestorePlanError(f"subtask assignment 'key_groups' must be [first, last], got {groups!r}")
        olds = _list(obj, "old_subtasks", "subtask assignment")
        if not all(_is_int(s) for s in olds):
            raise RestorePlanError(f"subtask assignment 'old_subtasks' must be ints, got {olds!r}")
        try:
            groups_range = KeyGroupRange(groups[0], groups[1])
        except ValueError as exc:
            raise RestorePlanError(str(exc)) from None
        return cls(_int(obj, "subtask", "subtask assignment"), groups_range, tuple(olds))


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

    @property
    def ok(self) -> bool:
        return not self.refusals

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "old_uid": self.old_uid,
            "action": self.action,
            "old_parallelism": self.old_parallelism,
            "new_parallelism": self.new_parallelism,
            "states": list(self.states),
            "new_states": list(self.new_states),
            "dropped_states": list(self.dropped_states),
            "subtasks": [s.to_json() for s in self.subtasks],
            "notes": list(self.notes),
            "refusals": list(self.refusals),
        }

    @classmethod
    def from_json(cls, value: Any) -> OperatorRow:
        obj = _obj(value, "operator row")
        what = "operator row"
        action = _str(obj, "action", what)
        if action not in ACTIONS:
            raise RestorePlanError(
                f"operator row 'action' must be one of {', '.join(ACTIONS)}, got {action!r}"
            )
        old_uid = obj.get("old_uid")
        if old_uid is not None and not isinstance(old_uid, str):
            raise RestorePlanError(f"operator row 'old_uid' must be a string or null, got {old_uid!r}")
        return cls(
            uid=_str(obj, "uid", what),
            old_uid=old_uid,
            action=action,
            old_parallelism=_opt_int(obj, "old_parallelism", what),
            new_parallelism=_opt_int(obj, "new_parallelism", what),
            states=_strs(obj, "states", what),
            new_states=_strs(obj, "new_states", what),
            dropped_states=_strs(obj, "dropped_states", what),
            subtasks=tuple(SubtaskAssignment.from_json(s) for s in _list(obj, "subtasks", what, [])),
            notes=_strs(obj, "notes", what),
            refusals=_strs(obj, "refusals", what),
        )


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """The outcome of :func:`plan_restore`: rows, refusals, notes; ``ok`` iff nothing was refused."""

    job_id: str
    max_parallelism: int
    snapshot_job_id: str
    snapshot_kind: str
    checkpoint_id: int | None
    location: str
    snapshot_max_parallelism: int
    claim_mode: str
    allow_non_restored_state: bool
    rows: tuple[OperatorRow, ...]
    refusals: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals

    @property
    def claim_mode_meaning(self) -> str:
        return CLAIM_MODES[self.claim_mode]

    def row(self, uid: str) -> OperatorRow:
        """The row of ``uid`` (a job uid, or a snapshot uid for dropped/removed rows); KeyError if none."""
        for row in self.rows:
            if row.uid == uid:
                return row
        raise KeyError(uid)

    def describe_snapshot(self) -> str:
        cid = "" if self.checkpoint_id is None else f" {self.checkpoint_id}"
        where = f" at {self.location}" if self.location else ""
        return f"{self.snapshot_kind}{cid}{where} of job {self.snapshot_job_id!r}"

    def summary(self) -> str:
        """One line: what is restored where, and whether it may proceed."""
        head = f"restore of {self.describe_snapshot()} into job {self.job_id!r}"
        if self.ok:
            return f"{head}: ok ({len(self.rows)} operator{_s(self.rows)})"
        return f"{head} refused: {len(self.refusals)} problem{_s(self.refusals)}"

    def raise_if_refused(self) -> None:
        """Raise :class:`RestorePlanError` (summary line, then one line per reason) unless ok."""
        if not self.ok:
            raise RestorePlanError("\n".join([self.summary(), *(f"  - {r}" for r in self.refusals)]))

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "ok": self.ok,
            "job_id": self.job_id,
            "max_parallelism": self.max_parallelism,
            "snapshot": {
                "job_id": self.snapshot_job_id,
                "kind": self.snapshot_kind,
                "checkpoint_id": self.checkpoint_id,
                "location": self.location,
                "max_parallelism": self.snapshot_max_parallelism,
            },
            "claim_mode": self.claim_mode,
            "claim_mode_meaning": self.claim_mode_meaning,
            "allow_non_restored_state": self.allow_non_restored_state,
            "operators": [row.to_json() for row in self.rows],
            "refusals": list(self.refusals),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, value: Any) -> RestorePlan:
        obj = _obj(value, "restore plan")
        version = obj.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
            raise RestorePlanError(f"restore plan format_version {version!r} is not supported")
        snap = _obj(obj.get("snapshot"), "restore plan snapshot")
        claim_mode = _str(obj, "claim_mode", "restore plan")
        if claim_mode not in CLAIM_MODES:
            raise RestorePlanError(f"restore plan has unknown claim mode {claim_mode!r}")
        return cls(
            job_id=_str(obj, "job_id", "restore plan"),
            max_parallelism=_int(obj, "max_parallelism", "restore plan"),
            snapshot_job_id=_str(snap, "job_id", "restore plan snapshot"),
            snapshot_kind=_str(snap, "kind", "restore plan snapshot"),
            checkpoint_id=_opt_int(snap, "checkpoint_id", "restore plan snapshot"),
            location=_str(snap, "location", "restore plan snapshot"),
            snapshot_max_parallelism=_int(snap, "max_parallelism", "restore plan snapshot"),
            claim_mode=claim_mode,
            allow_non_restored_state=_bool(obj, "allow_non_restored_state", "restore plan"),
            rows=tuple(OperatorRow.from_json(r) for r in _list(obj, "operators", "restore plan")),
            refusals=_strs(obj, "refusals", "restore plan"),
            notes=_strs(obj, "notes", "restore plan"),
        )

    def render_table(self) -> str:
        """A fixed-width table for ``epochal restore --dry-run`` (header, rows, refusals)."""
        lines = [
            f"Restore plan: {self.describe_snapshot()} -> job {self.job_id!r} "
            f"(max_parallelism {self.max_parallelism})",
            f"Claim mode {self.claim_mode}: {self.claim_mode_meaning}",
            *(f"Note: {n}" for n in self.notes),
            "",
        ]
        header = ("UID", "OLD UID", "ACTION", "PARALLELISM", "STATES", "NOTES")
        cells: list[tuple[tuple[str, ...], list[str]]] = []
        for row in self.rows:
            action = row.action if row.ok else f"{row.action}!"
            states = ",".join(
                [*row.states, *(f"+{s}" for s in row.new_states), *(f"-{s}" for s in row.dropped_states)]
            )
            extra = [*row.refusals, *row.notes]
            extra += [str(s) for s in row.subtasks[:_TABLE_SUBTASK_LIMIT]]
            if len(row.subtasks) > _TABLE_SUBTASK_LIMIT:
                extra.append(f"... {len(row.subtasks) - _TABLE_SUBTASK_LIMIT} more subtasks (see --json)")
            par = f"{_dash(row.old_parallelism)} -> {_dash(row.new_parallelism)}"
            line = (row.uid, row.old_uid or "-", action, par, states or "-", extra[0] if extra else "")
            cells.append((line, extra[1:]))
        widths = [max([len(header[i]), *(len(c[0][i]) for c in cells)]) for i in range(len(header) - 1)]
        indent = sum(widths) + 2 * len(widths)

        def fmt(values: tuple[str, ...]) -> str:
            padded = [v.ljust(w) for v, w in zip(values[:-1], widths)]
            return "  ".join([*padded, values[-1]]).rstrip()

        lines.append(fmt(header))
        for first, more in cells:
            lines.append(fmt(first))
            lines.extend((" " * indent + m).rstrip() for m in more)
        if not self.rows:
            lines.append("(no operators)")
        lines.append("")
        if self.ok:
            lines.append("OK: " + self.summary())
        else:
            lines.append(f"REFUSED ({len(self.refusals)}): " + self.summary())
            lines.extend(f"  - {r}" for r in self.refusals)
        lines.append("States: name restored, +name starts empty, -name dropped; ACTION! = refused.")
        return "\n".join(lines)


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
        out.append(SubtaskAssignment(subtask, groups, tuple(range(first_old, last_old + 1))))
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
        snapshot_job_id=snapshot.job_id,
        snapshot_kind=snapshot.kind,
        checkpoint_id=snapshot.checkpoint_id,
        location=snapshot.location,
        snapshot_max_parallelism=snapshot.max_parallelism,
        claim_mode=options.claim_mode,
        allow_non_restored_state=options.allow_non_restored_state,
        rows=tuple(rows),
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


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

_MISSING: Any = object()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _s(items: Iterable[object] | int) -> str:
    count = items if isinstance(items, int) else len(list(items))
    return "" if count == 1 else "s"


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RestorePlanError(f"{what} must be a JSON object, got {value!r}")
    return value


def _get(obj: Mapping[str, Any], name: str, what: str, default: Any) -> Any:
    if name in obj:
        return obj[name]
    if default is _MISSING:
        raise RestorePlanError(f"{what} has no field {name!r}")
    return default


def _str(obj: Mapping[str, Any], name: str, what: str, default: Any = _MISSING) -> str:
    value = _get(obj, name, what, default)
    if not isinstance(value, str):
        raise RestorePlanError(f"{what} field {name!r} must be a string, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], name: str, what: str) -> int:
    value = _get(obj, name, what, _MISSING)
    if not _is_int(value):
        raise RestorePlanError(f"{what} field {name!r} must be an integer, got {value!r}")
    result: int = value
    return result


def _opt_int(obj: Mapping[str, Any], name: str, what: str) -> int | None:
    value = _get(obj, name, what, None)
    if value is not None and not _is_int(value):
        raise RestorePlanError(f"{what} field {name!r} must be an integer or null, got {value!r}")
    result: int | None = value
    return result


def _bool(obj: Mapping[str, Any], name: str, what: str, default: Any = _MISSING) -> bool:
    value = _get(obj, name, what, default)
    if not isinstance(value, bool):
        raise RestorePlanError(f"{what} field {name!r} must be true or false, got {value!r}")
    return value


def _list(obj: Mapping[str, Any], name: str, what: str, default: Any = _MISSING) -> list[Any]:
    value = _get(obj, name, what, default)
    if not isinstance(value, list):
        raise RestorePlanError(f"{what} field {name!r} must be a list, got {value!r}")
    return value


def _strs(obj: Mapping[str, Any], name: str, what: str) -> tuple[str, ...]:
    values = _list(obj, name, what, [])
    if not all(isinstance(v, str) for v in values):
        raise RestorePlanError(f"{what} field {name!r} must be a list of strings, got {values!r}")
    return tuple(values)
