"""Local recovery (issue 23 item 2; Flink's ``state.backend.local-recovery``): where the process
survives between epochs -- ``epochal run --epochs N``, the in-process executor in one Python
process, a reused Spark Python worker -- the next epoch adopts the live operators of the previous
one instead of fetching, verifying and decoding their state and opening fresh operators.

Opt-in per job: ``Job(local_recovery=True)``, and only where the subtasks run in the process that
ran them before: the in-process executor (``--executor local``, ``epochal run --epochs N``, a test).
Inside a Spark task it is off (:func:`enabled_here`): the next epoch's task of a subtask may run in
any Python worker, so kept chains would mostly be memory that is never adopted. After a subtask has written its acks, its chain of
operators is kept (one entry per job, stage, subtask, parallelism and key-group range) together with
what those acks said. When a later epoch opens the same subtask, the entry is *taken* (so a failure
from here on leaves nothing behind) and adopted only if all of these hold, else the epoch restores
from the store as always (and the entry is dropped):

1. the epoch restores from exactly the checkpoint the kept operators snapshotted (a crash before it
   completed, a restore from a savepoint or an older checkpoint, an import: another id);
2. the completed checkpoint holds, for every stateful operator of the subtask, the very ack this
   process wrote (same attempt, same state files, same snapshot document): a zombie's or another
   attempt's ack, or state files changed by anyone, means another state;
3. the operators are of the same kinds, uids and order (the job was not changed);
4. nothing was processed after the snapshot (unaligned checkpoints go on after the barrier).

Adoption calls :meth:`Operator.reopen` on each operator: the new epoch's context, the checkpoint as
the base of the next incremental snapshot. The incremental bases (file chains) come from the
checkpoint's metadata, their entries from the kept snapshot (no file is read). A rescale changes
the key-group range (1 fails), so it always reads the store.

What it costs: the kept state stays in memory between epochs (plus the frozen snapshot the heap
backend made), and a state file damaged in the store after completion is not noticed by an adopted
epoch -- the next cold restore or ``epochal validate --deep`` finds it. Measured in
``bench/results/local_recovery.md``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


def kept_ack(attempt: int, handles: Sequence[Any], snapshot: Mapping[str, Any]) -> KeptAck:
    return KeptAck(
        attempt, canonical([[h.key, h.size, h.checksum] for h in handles]), canonical(dict(snapshot))
    )


_lock = threading.Lock()
_kept: dict[WarmKey, WarmChain] = {}
MAX_KEPT = 256
"""Chains kept at most per process (the oldest is dropped, cold next time)."""


def keep(key: WarmKey, chain: WarmChain) -> None:
    with _lock:
        _kept.pop(key, None)
        while len(_kept) >= MAX_KEPT:
            _kept.pop(next(iter(_kept)))
        _kept[key] = chain


def take(key: WarmKey) -> WarmChain | None:
    """The kept chain of ``key``, removed from the cache (it is adopted or dropped now)."""
    with _lock:
        return _kept.pop(key, None)


def clear() -> None:
    """Forget every kept chain (tests; a process that wants its memory back)."""
    with _lock:
        _kept.clear()


def refusal(
    chain: WarmChain, metadata: CompletedMetadata | None, subtask: int, shape: list[tuple[str | None, str]]
) -> str | None:
    """Why ``chain`` cannot be adopted for an epoch restoring from ``metadata`` (None: it can)."""
    if metadata is None:
        return "the epoch restores from no checkpoint"
    if metadata.checkpoint_id != chain.checkpoint_id:
        return f"the epoch restores from checkpoint {metadata.checkpoint_id}, not {chain.checkpoint_id}"
    if shape != chain.shape:
        return "the job's operators changed"
    held = {t.task.uid: t for t in metadata.tasks if t.task.subtask == subtask}
    for uid, ack in chain.acks.items():
        task = held.get(uid)
        if task is None or kept_ack(task.attempt, task.handles, task.snapshot) != ack:
            return f"checkpoint {metadata.checkpoint_id} holds another ack of {uid} subtask {subtask}"
    return None
