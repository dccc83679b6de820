"""The operator model of a subtask (Flink's StreamOperator, vectorized per Arrow batch).

Lifecycle inside one epoch (or, with local recovery, ``reopen(ctx, n)`` instead of ``open`` when the
live operator of the previous epoch equals the checkpoint n the epoch restores from)::

    open(ctx)                                     state restored by the runtime before this
    { process_batch(batch) | process_watermark(ts) }*
    prepare_snapshot_pre_barrier(n)               flush what must go downstream before barrier n
    snapshot(n) -> OperatorSnapshot               synchronous part: frozen state and timers
    finish()                                      end of input (a drained job): flush everything

``process_watermark`` fires due event-time timers, then forwards the watermark downstream, so an
output produced by a timer is never behind the watermark that caused it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from state_store.core.keygroups import KeyGroupRange
from state_store.core.state.snapshot import KeyedStateSnapshot

if TYPE_CHECKING:
    from spark_jobs.runtime.spill_state import SpillPart, SpillSource


class Output(Protocol):
    def emit(self, batch: pa.RecordBatch) -> None: ...

    def emit_watermark(self, timestamp: int) -> None: ...

    def side(self, tag: str, batch: pa.RecordBatch) -> None: ...


@dataclass(frozen=True, slots=True)
class OperatorContext:
    """What an operator knows about where it runs. ``now_ms`` is the epoch's processing time (the
    checkpoint's trigger time): deterministic, so a replayed epoch makes the same decisions."""

    job_id: str
    subtask: int
    parallelism: int
    max_parallelism: int
    key_groups: KeyGroupRange
    now_ms: int
    checkpoint_id: int
    state_memory_mb: int | None = None
    """``Job.state_memory_mb``: keyed value state on local disk under this budget (None: in memory)."""
    state_dir: str | None = None
    """``Job.state_dir``: the root of the subtasks' spill directories (None: the temporary directory)."""


@dataclass
class OperatorSnapshot:
    """Synchronous part of an operator's snapshot: keyed state, timers per key group, and small
    JSON-able operator state (``extra``)."""

    keyed: KeyedStateSnapshot | None = None
    timers: dict[int, dict[str, list[list[Any]]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    spill: SpillPart | None = None
    """Value state kept on local disk (``spark_jobs.runtime.spill_state``): its run files."""


@dataclass
class OperatorRestore:
    """What the runtime restored for an operator from the restore checkpoint."""

    keyed: list[KeyedStateSnapshot] = field(default_factory=list)
    timers: dict[int, dict[str, list[list[Any]]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    checkpoint_id: int | None = None
    spill: list[SpillSource] = field(default_factory=list)
    """Spill stores of the old subtasks whose key groups meet this subtask's (``spill_native``
    restores only; otherwise their rows are decoded into ``keyed``)."""
    trusted_key_groups: bool = False
    """True when ``keyed`` was read from files of a completed checkpoint that matched its size and
    SHA-256 listing (``read_operator_restore``). Such a file holds each entry under the key group
    Epochal put it in -- its snapshot path routes keys with the one hash function, and a savepoint
    import checks every key (``spark_jobs.lifecycle.snapshots.read_savepoint``) -- so a restore does not hash
    every key again, as Flink trusts the key-group offsets of its own snapshots. False: every key's
    key group is checked (state built by hand, tests)."""


class Operator:
    """Base operator: forwards batches and watermarks unchanged. Stateless unless overridden."""

    uid: str | None = None
    stateful: bool = False

    def __init__(self) -> None:
        self.output: Output | None = None
        self.ctx: OperatorContext | None = None
        self.dead: dict[str, int] = {}

    @property
    def out(self) -> Output:
        assert self.output is not None, "operator used before the chain was wired"
        return self.output

    def open(self, ctx: OperatorContext, restored: OperatorRestore | None) -> None:
        self.ctx = ctx

    def process_batch(self, batch: pa.RecordBatch) -> None:
        self.out.emit(batch)

    def process_watermark(self, timestamp: int) -> None:
        self.out.emit_watermark(timestamp)

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        return OperatorSnapshot()

    def finish(self) -> None:
        return None

    def dispose(self) -> None:
        """The subtask is done (acks written): drop state so that reference counting frees it
        while the cyclic GC is still paused (``spark_jobs.runtime.gcpause``)."""
        return None

    def reopen(self, ctx: OperatorContext, checkpoint_id: int) -> None:
        """Local recovery (``spark_jobs.runtime.warm``): the operator's live state equals completed
        checkpoint ``checkpoint_id`` (its snapshot, with nothing processed since) and it runs the
        next epoch as it is, instead of a fresh operator opened from the files. Overrides reset
        what is per epoch (metrics) and make ``checkpoint_id`` the base of the next incremental
        snapshot (as a restore from it would)."""
        self.ctx = ctx

    def local_damage(self) -> str | None:
        """Local recovery: why this live operator's local state can no longer be trusted (a file it
        keeps on disk changed or vanished), else None; then the epoch reads the store instead."""
        return None

    def metrics(self) -> dict[str, Any]:
        return {}


class MapOperator(Operator):
    """``map``/``flat_map``: a vectorized function from batch to batch (possibly empty)."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any]) -> None:
        super().__init__()
        self.fn = fn

    def process_batch(self, batch: pa.RecordBatch) -> None:
        result = self.fn(batch)
        if isinstance(result, pa.Table):
            for b in result.to_batches():
                self.out.emit(b)
        elif result is not None and result.num_rows:
            self.out.emit(result)


class FilterOperator(Operator):
    """``filter``: the function returns a boolean mask (array or list) for the batch."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any]) -> None:
        super().__init__()
        self.fn = fn

    def process_batch(self, batch: pa.RecordBatch) -> None:
        kept = batch.filter(self.fn(batch))
        if kept.num_rows:
            self.out.emit(kept)
