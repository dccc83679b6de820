"""The inputs of restore planning: what the new job looks like, what a snapshot holds, the options.

Pure (standard library only). Every shape validates itself when built and raises a one-line
:class:`RestorePlanError` naming the operator and the field, so a shape that exists is well formed:

* an :class:`OperatorShape` has a non-empty uid, a positive parallelism, a ``states`` mapping of
  non-empty name -> non-empty kind (keyed kinds only on a keyed operator, none on a stateless one)
  and ``value_schemas`` only for its own states; both mappings are sorted copies (name order);
* a :class:`JobShape` or :class:`SnapshotShape` has a valid max_parallelism, no two operators with
  one uid and no operator above its max_parallelism; a checkpoint snapshot has its checkpoint_id;
* :class:`RestoreOptions` has a known claim mode, a positive parallelism (if any) and a uid_map of
  non-empty uids, sorted by old uid.

As JSON the shapes are what :func:`state_store.core.codec.to_jsonable` writes (field names as
keys, in field order); :func:`state_store.core.codec.from_jsonable` reads them back through the
same validation.

State kinds are strings: the keyed kinds are the :class:`StateKind` values (``"value"``,
``"list"``, ``"map"``, ``"reducing"``, ``"aggregating"``); ``"operator_list"`` is a
split-distribute operator list and ``"union_list"`` a union operator list; any other non-empty
kind (e.g. ``"timers"``) is accepted and only compared for equality.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from state_store.core.codec import is_int
from state_store.core.keygroups import check_max_parallelism
from state_store.core.state.descriptors import StateKind
from state_store.core.state.operator import OperatorStateMode

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


class RestorePlanError(ValueError):
    """Invalid restore input, or (from :meth:`RestorePlan.raise_if_refused`) a refused restore."""


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


@dataclass(frozen=True, slots=True)
class OperatorShape:
    """One operator as a job declares it or as a snapshot holds it.

    ``states`` maps state name -> kind (see module docstring); ``value_schemas`` optionally maps a
    state name -> {field -> :class:`FieldType`} (plain ``{"type", "nullable"}`` dicts are accepted).
    For a snapshot, ``parallelism`` is the parallelism it was taken with and ``states`` the states
    found in it. Both mappings are stored as copies sorted by name.
    """

    uid: str
    stateful: bool
    keyed: bool
    parallelism: int
    states: dict[str, str] = field(default_factory=dict)
    value_schemas: dict[str, dict[str, FieldType]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"operator {self.uid!r}"
        if not isinstance(self.uid, str) or not self.uid:
            raise RestorePlanError(f"operator uid must be a non-empty string, got {self.uid!r}")
        for name in ("stateful", "keyed"):
            if not isinstance(getattr(self, name), bool):
                raise RestorePlanError(f"{where}: {name} must be a bool, got {getattr(self, name)!r}")
        if not is_int(self.parallelism) or self.parallelism < 1:
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
        schemas: dict[str, dict[str, FieldType]] = {}
        for name, fields in sorted(self.value_schemas.items()):
            if name not in states:
                raise RestorePlanError(f"{where}: value schema given for unknown state {name!r}")
            if not isinstance(fields, Mapping):
                raise RestorePlanError(f"{where}: value schema of state {name!r} must be a mapping")
            converted: dict[str, FieldType] = {}
            for fname, ftype in sorted(fields.items()):
                if not isinstance(fname, str) or not fname:
                    raise RestorePlanError(f"{where}: state {name!r} has a field name {fname!r}")
                converted[fname] = _field_type(ftype, f"{where}: state {name!r} field {fname!r}")
            schemas[name] = converted
        object.__setattr__(self, "states", states)
        object.__setattr__(self, "value_schemas", schemas)

    @property
    def has_state(self) -> bool:
        return bool(self.states)

    @property
    def has_keyed_state(self) -> bool:
        return any(kind in KEYED_STATE_KINDS for kind in self.states.values())


def _field_type(value: Any, where: str) -> FieldType:
    """A :class:`FieldType`, or one built from a ``{"type", "nullable"}`` mapping (schema as JSON)."""
    if isinstance(value, FieldType):
        return value
    if not isinstance(value, Mapping):
        raise RestorePlanError(f"{where} must be a FieldType or a {{type, nullable}} mapping, got {value!r}")
    type_name: Any = value.get("type")  # None if missing: FieldType refuses it by name
    return FieldType(type_name, value.get("nullable", False))


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
        check_one_of(self.kind, SNAPSHOT_KINDS, "snapshot kind")
        if self.checkpoint_id is not None and (not is_int(self.checkpoint_id) or self.checkpoint_id < 0):
            raise RestorePlanError(f"checkpoint_id must be a non-negative int, got {self.checkpoint_id!r}")
        if self.kind == "checkpoint" and self.checkpoint_id is None:
            raise RestorePlanError("a checkpoint snapshot needs its checkpoint_id")
        if not isinstance(self.location, str):
            raise RestorePlanError(f"snapshot location must be a string, got {self.location!r}")
        _check_max_p(self.max_parallelism, f"snapshot {self.location!r}")
        object.__setattr__(self, "operators", tuple(self.operators))
        _check_operators(self.operators, self.max_parallelism, f"snapshot {self.location!r}")

    def describe(self) -> str:
        return snapshot_description(self.kind, self.checkpoint_id, self.location, self.job_id)


def snapshot_description(kind: str, checkpoint_id: int | None, location: str, job_id: str) -> str:
    """``savepoint 12 at <location> of job 'orders'`` (the id and the location only if known)."""
    cid = "" if checkpoint_id is None else f" {checkpoint_id}"
    where = f" at {location}" if location else ""
    return f"{kind}{cid}{where} of job {job_id!r}"


@dataclass(frozen=True, slots=True)
class RestoreOptions:
    """User choices for a restore (``epochal restore`` flags).

    ``parallelism`` (if given) overrides the parallelism of every operator of the new job; it is
    checked against the job's max_parallelism by :func:`plan_restore`.
    """

    allow_non_restored_state: bool = False
    uid_map: dict[str, str] = field(default_factory=dict)
    parallelism: int | None = None
    claim_mode: str = "NO_CLAIM"
    allow_foreign: bool = False

    def __post_init__(self) -> None:
        for name in ("allow_non_restored_state", "allow_foreign"):
            if not isinstance(getattr(self, name), bool):
                raise RestorePlanError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.parallelism is not None and (not is_int(self.parallelism) or self.parallelism < 1):
            raise RestorePlanError(f"parallelism must be a positive int, got {self.parallelism!r}")
        check_one_of(self.claim_mode, CLAIM_MODES, "claim mode")
        if not isinstance(self.uid_map, Mapping):
            raise RestorePlanError("uid_map must be a mapping of old uid -> new uid")
        for old, new in self.uid_map.items():
            if not isinstance(old, str) or not old or not isinstance(new, str) or not new:
                raise RestorePlanError(
                    f"uid_map entry {old!r} -> {new!r}: both uids must be non-empty strings"
                )
        object.__setattr__(self, "uid_map", dict(sorted(self.uid_map.items())))


def check_one_of(value: object, allowed: Collection[str], what: str) -> None:
    """Raise :class:`RestorePlanError` (``<what> must be one of a, b, got 'x'``) unless allowed."""
    if value not in allowed:
        raise RestorePlanError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
