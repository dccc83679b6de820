"""Local recovery (issue 23 item 2; Flink's ``state.backend.local-recovery``): where the process
survives between epochs -- ``epochal run --executor local --epochs N``, the in-process executor in
one Python process -- the next epoch adopts the live operators of the previous one instead of
fetching, verifying and decoding their state and opening fresh operators.

Opt-in per job: ``Job(local_recovery=True)``, and only where the subtasks run in the process that
ran them before: the in-process executor (``--executor local``, a test).
Inside a Spark task it is off (:func:`enabled_here`): the next epoch's task of a subtask may run in
any Python worker, so kept chains would mostly be memory that is never adopted. After a subtask
has written its acks, its chain of operators is kept (one entry per job, stage, subtask,
parallelism and key-group range) together with what those acks said. When a later epoch opens the
same subtask, the entry is *taken* (so a failure from here on leaves nothing behind) and adopted
only if all of these hold, else the epoch restores from the store as always (and the entry is
dropped and disposed):

1. the epoch restores from exactly the checkpoint the kept operators snapshotted (a crash before it
   completed, a restore from a savepoint or an older checkpoint, an import: another id);
2. the completed checkpoint holds, for every stateful operator of the subtask, the very ack this
   process wrote (same attempt, same state files, same snapshot document): a zombie's or another
   attempt's ack, or state files changed by anyone, means another state;
3. the operators are of the same kinds, uids and order, and their steps are configured alike
   (:func:`logic_of`: window assigner and aggregates, TTL, the stage's key, a function's state
   descriptors -- a job redefined in the same process must not go on with the old configuration);
4. nothing was processed after the snapshot (unaligned checkpoints go on after the barrier);
5. no operator reports damaged local state (:meth:`Operator.local_damage`: a spill store's run file
   that changed or vanished on disk since the snapshot).

Adoption takes the user functions of the freshly built operators (:func:`take_functions`: a
restore runs the job's current functions, and a function's Python attributes are no state) and
calls :meth:`Operator.reopen` on each operator: the new epoch's context, no watermark yet (as after a
restore), the checkpoint as the base of the next incremental snapshot. The incremental bases (file
chains) come from the checkpoint's metadata, their entries from the kept snapshot (no file is
read). A rescale changes the key-group range (1 fails), so it always reads the store, and the chains
kept at the old width are released (:func:`take_other_scales`).

What it costs: the kept state stays in memory between epochs (plus the frozen snapshot the heap
backend made), and a state file damaged in the store after completion is not noticed by an adopted
epoch -- the next cold restore or ``epochal validate --deep`` finds it. Measured in
``bench/results/local_recovery.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import threading
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.operators.base import Operator, OperatorSnapshot
from state_store.core.keygroups import KeyGroupRange
from state_store.core.manifests import CompletedMetadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmKey:
    """Which subtask a kept chain belongs to (``store`` and job, stage, subtask, width, range)."""

    store_uri: str
    job_id: str
    stage: int
    subtask: int
    width: int
    max_parallelism: int
    key_groups: KeyGroupRange


@dataclass(frozen=True)
class KeptAck:
    """What one stateful operator's ack said: the completed checkpoint must hold exactly this."""

    attempt: int
    handles: str
    snapshot: str


@dataclass
class WarmChain:
    """A subtask's operators after its acks for ``checkpoint_id``, and what those acks said."""

    checkpoint_id: int
    ops: list[Operator]
    acks: dict[str, KeptAck]
    snapshots: dict[str, OperatorSnapshot]
    logic: str | None = None
    """:func:`logic_of` the stage's steps that built ``ops`` (None: not compared)."""

    @property
    def shape(self) -> list[tuple[str | None, str]]:
        return shape_of(self.ops)


def enabled_here() -> bool:
    """False inside a Spark task (a Python worker of an executor), True elsewhere."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return True
    return TaskContext.get() is None


def shape_of(ops: Sequence[Operator]) -> list[tuple[str | None, str]]:
    return [(op.uid, type(op).__name__) for op in ops]


def canonical(value: Any) -> str:
    """A JSON text that two equal documents share (tuples as lists, keys sorted)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


FUNCTIONS = ("fn", "co_fn")
"""Operator attributes holding the user's function: taken from the freshly built operator."""


def logic_of(specs: Sequence[Any], key: Any = None) -> str:
    """A text two equally configured chains share: each step spec's fields (structurally, since
    e.g. ``Aggregates`` has no value repr), its state kinds, and the stage's key. A user function
    counts by its state descriptors (and ``state_schema``) only: :func:`take_functions` swaps it."""
    out: list[Any] = [_structure(key)]
    for spec in specs:
        fields = {
            f.name: _function(getattr(spec, f.name))
            if f.name in FUNCTIONS
            else _structure(getattr(spec, f.name))
            for f in dataclasses.fields(spec)
        }
        out.append([type(spec).__qualname__, fields, spec.state_kinds()])
    return canonical(out)


def _function(fn: Any) -> Any:
    return str(getattr(fn, "state_schema", None))


def _structure(value: Any, depth: int = 0) -> Any:
    """A stable description of a configuration value (no ``id``-based repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if depth >= 6:
        return type(value).__qualname__
    if isinstance(value, (list, tuple)):
        return [_structure(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(canonical(_structure(v, depth + 1)) for v in value)
    if isinstance(value, dict):
        return {str(k): _structure(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (types.FunctionType, types.MethodType)):
        code = getattr(value, "__code__", None)
        return [value.__qualname__, code.co_code.hex() if code is not None else None]
    attrs: dict[str, Any] = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(value, name):
                attrs.setdefault(name, getattr(value, name))
    return [type(value).__qualname__, {k: _structure(v, depth + 1) for k, v in sorted(attrs.items())}]


def take_functions(kept: Sequence[Operator], fresh: Sequence[Operator]) -> None:
    """Adopted operators run the user functions of the freshly built ones (same shape)."""
    for old, new in zip(kept, fresh, strict=True):
        for name in FUNCTIONS:
            if hasattr(new, name):
                setattr(old, name, getattr(new, name))


def kept_ack(attempt: int, handles: Sequence[Any], snapshot: Mapping[str, Any]) -> KeptAck:
    return KeptAck(
        attempt, canonical([[h.key, h.size, h.checksum] for h in handles]), canonical(dict(snapshot))
    )


_lock = threading.Lock()
_kept: dict[WarmKey, WarmChain] = {}
MAX_KEPT = 256
"""Chains kept at most per process (the oldest is dropped, cold next time)."""


def keep(key: WarmKey, chain: WarmChain) -> None:
    """Keep ``chain`` for ``key``; a chain it replaces, and the oldest beyond ``MAX_KEPT``, are
    disposed (their state freed at once, not left to the cyclic collector)."""
    with _lock:
        dropped = [c for c in (_kept.pop(key, None),) if c is not None]
        while len(_kept) >= MAX_KEPT:
            dropped.append(_kept.pop(next(iter(_kept))))
        _kept[key] = chain
    _dispose(dropped)


def _dispose(chains: Sequence[WarmChain]) -> None:
    """Free the state of chains that will never be adopted, inside the GC pause (``gcpause``)."""
    with gc_paused():
        for dropped in chains:
            for op in dropped.ops:
                op.dispose()


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` found for a subtask opening with local recovery on."""

    key: WarmKey
    logic: str
    kept: WarmChain | None
    """The chain to adopt (its operators already run the fresh functions), or None: read the store."""


def decide(
    key: WarmKey,
    logic: str,
    metadata: CompletedMetadata | None,
    subtask: int,
    fresh: Sequence[Operator],
) -> Decision:
    """Take ``key``'s kept chain and adopt it unless :func:`refusal` says why not (logged); chains
    refused, or kept at another scale, are disposed."""
    kept = take(key)
    dropped = take_other_scales(key)
    if kept is not None:
        why = refusal(kept, metadata, subtask, shape_of(fresh), logic)
        if why is not None:
            log.info("local recovery of %s stage %d subtask %d: read from the store (%s)",
                     key.job_id, key.stage, subtask, why)  # fmt: skip
            dropped.append(kept)
            kept = None
    _dispose(dropped)
    if kept is not None:
        take_functions(kept.ops, fresh)
    return Decision(key, logic, kept)


def take(key: WarmKey) -> WarmChain | None:
    """The kept chain of ``key``, removed from the cache (it is adopted or dropped now)."""
    with _lock:
        return _kept.pop(key, None)


def take_other_scales(key: WarmKey) -> list[WarmChain]:
    """Remove and return the chains of ``key``'s store, job and stage kept at another width or
    key-group range (a rescale): the epoch restores from a newer checkpoint than theirs, so they
    could only be adopted after that one is aborted -- not worth their memory. The caller disposes."""
    with _lock:
        stale = [
            k
            for k in _kept
            if (k.store_uri, k.job_id, k.stage) == (key.store_uri, key.job_id, key.stage)
            and (k.width, k.max_parallelism) != (key.width, key.max_parallelism)
        ]
        return [_kept.pop(k) for k in stale]


def clear() -> None:
    """Forget every kept chain, disposing of it (tests; a process that wants its memory back)."""
    with _lock:
        dropped = list(_kept.values())
        _kept.clear()
    _dispose(dropped)


def refusal(
    chain: WarmChain,
    metadata: CompletedMetadata | None,
    subtask: int,
    shape: list[tuple[str | None, str]],
    logic: str | None = None,
) -> str | None:
    """Why ``chain`` cannot be adopted for an epoch restoring from ``metadata`` (None: it can);
    ``logic`` (:func:`logic_of` the epoch's stage) is compared when both sides have one."""
    if metadata is None:
        return "the epoch restores from no checkpoint"
    if metadata.checkpoint_id != chain.checkpoint_id:
        return f"the epoch restores from checkpoint {metadata.checkpoint_id}, not {chain.checkpoint_id}"
    if shape != chain.shape:
        return "the job's operators changed"
    if logic is not None and chain.logic is not None and logic != chain.logic:
        return "the job's steps are configured otherwise"
    held = {t.task.uid: t for t in metadata.tasks if t.task.subtask == subtask}
    for uid, ack in chain.acks.items():
        task = held.get(uid)
        if task is None or kept_ack(task.attempt, task.handles, task.snapshot) != ack:
            return f"checkpoint {metadata.checkpoint_id} holds another ack of {uid} subtask {subtask}"
    for op in chain.ops:
        damage = op.local_damage()
        if damage is not None:
            return damage
    return None
