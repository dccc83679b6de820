"""Keyed operators share this base: a heap keyed state backend and a timer service over the
key groups the subtask owns, both restored before ``open`` returns."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.runtime.keys import KeySpec, key_column, key_groups
from spark_jobs.runtime.operators.base import Operator, OperatorContext, OperatorRestore, OperatorSnapshot
from spark_jobs.runtime.spill_rows import SpillKeyedRows
from spark_jobs.runtime.spill_state import SpillPart, SpillValueState, claim_directory, normal_keys
from state_store.core.keygroups import key_group_of
from state_store.core.state import KeyedStateBackend
from state_store.core.stream.timers import InternalTimer, TimerService

log = logging.getLogger(__name__)


_TOLD: set[tuple[str, str]] = set()
"""(job, uid) of the operators whose in-memory state under ``state_memory_mb`` was logged already."""
IN_MEMORY_NOTE = (
    "state_memory_mb keeps the state of process functions and deduplication on disk; "
    "this operator's state (a window's) is in memory"
)


class KeyedOperator(Operator):
    """With ``Job(state_memory_mb=...)`` an operator that ``can_spill`` keeps its keyed state in a
    spill store on local disk (``open_spill``; ``spark_jobs.runtime.spill_state``) and this base runs
    its checkpoint life: restore, snapshot, adoption by local recovery, damage checks, metrics,
    dispose. Timers stay on the heap."""

    stateful = True
    can_spill = False
    """True for operators that keep their state on disk under ``Job.state_memory_mb``."""
    spill: SpillValueState | None = None
    _spill_part: SpillPart | None = None
    """The spill store's last snapshot: the base of the next one if local recovery adopts it."""
    state_in_memory: str | None = None
    """Set when ``state_memory_mb`` is configured but this operator keeps its state in memory (the
    ack's metrics say so, and the log, once per process)."""
    _restored_from: int | None = None
    """The checkpoint the state was restored from (or adopted as, ``reopen``): the base of the next
    incremental snapshot of operators that keep state outside the heap backend."""

    def __init__(self, uid: str, key: KeySpec) -> None:
        super().__init__()
        self.uid = uid
        self.key = key
        self.key_name = key if isinstance(key, str) else "key"
        self._now = 0

    def now_ms(self) -> int:
        return self._now

    def open(self, ctx: OperatorContext, restored: OperatorRestore | None) -> None:
        super().open(ctx, restored)
        self._now = ctx.now_ms
        if ctx.state_memory_mb is not None and self.can_spill:
            claimed = claim_directory(ctx.state_dir, ctx.job_id, self.uid or "op", ctx.subtask)
            self.spill = self.open_spill(ctx, claimed, ctx.state_memory_mb << 20)
            self.spill.set_now(ctx.now_ms)
        elif ctx.state_memory_mb is not None:
            self.state_in_memory = IN_MEMORY_NOTE
            if (ctx.job_id, str(self.uid)) not in _TOLD:
                _TOLD.add((ctx.job_id, str(self.uid)))
                log.warning("job %s operator %s: %s", ctx.job_id, self.uid, IN_MEMORY_NOTE)
        self.backend = KeyedStateBackend(ctx.key_groups, ctx.max_parallelism, now_ms=self.now_ms)
        self.timers: TimerService[Any, Any] = TimerService(
            self, lambda key: key_group_of(key, ctx.max_parallelism)
        )
        self.register_states()
        if restored is not None:
            self.timers.restore(restored.timers, key_groups=ctx.key_groups)
            self.restore_keyed(restored)
            self.restore_extra(restored.extra)

    def open_spill(
        self, ctx: OperatorContext, claimed: tuple[Path, int], budget_bytes: int
    ) -> SpillValueState:
        """The spill store of an operator that ``can_spill``, in the ``claimed`` directory."""
        raise NotImplementedError

    def restore_keyed(self, restored: OperatorRestore) -> None:
        """Load the restored keyed state (timers are restored already): into the spill store when
        there is one (its own run files, and the rows of a heap checkpoint or a savepoint), else
        into the heap backend."""
        if self.spill is not None:
            self.spill.restore(restored.spill)
            self.spill.load_rows(restored.keyed)
            return
        self.backend.restore(
            restored.keyed,
            from_checkpoint=restored.checkpoint_id,
            verify_keys=not restored.trusted_key_groups,
        )

    def key_groups_check(self, restored: OperatorRestore) -> Callable[[Any], Any] | None:
        """For a columnar restore: the key group of each key (int64 array, list or string array),
        to check that restored files list every key under its own key group -- or None when the
        files are trusted (``OperatorRestore.trusted_key_groups``)."""
        if restored.trusted_key_groups:
            return None
        max_parallelism = self.backend.max_parallelism
        return lambda keys: key_groups(
            keys if isinstance(keys, pa.Array) else pa.array(keys), max_parallelism
        )

    def dispose(self) -> None:
        backend = getattr(self, "backend", None)  # None: disposed before it was opened (a failed open)
        if backend is not None:
            backend.dispose()
        if self.spill is not None:
            self.spill.dispose()

    def reopen(self, ctx: OperatorContext, checkpoint_id: int) -> None:
        super().reopen(ctx, checkpoint_id)
        self._now = ctx.now_ms
        self.timers.forget_time()  # a restore starts without a watermark (it is not checkpointed)
        self.backend.notify_checkpoint_complete(checkpoint_id)
        self._restored_from = checkpoint_id
        if self.spill is not None:
            self.spill.snapshot_taken(self._spill_part)
            self.spill.set_now(ctx.now_ms)

    def local_damage(self) -> str | None:
        return None if self.spill is None else self.spill.damaged_file()

    def metrics(self) -> dict[str, Any]:
        if self.spill is None:
            return super().metrics()
        return {
            **super().metrics(),
            "state_on_disk_bytes": self.spill.disk_bytes,
            "state_memory_peak_bytes": self.spill.peak_memory_bytes,
        }

    def key_pages(self, keys: pa.Array, uniques: list[Any]) -> Iterator[tuple[int, int]]:
        """Spans of ``uniques`` (the distinct keys of ``keys``) to process in turn: all at once with
        the state in memory; a page at a time with a per-key store on disk, each paged in before its
        span is yielded and out after (a key type the disk cannot hold, or a key of another
        subtask, raises first, before the store is touched)."""
        spill = self.spill
        if not isinstance(spill, SpillKeyedRows):
            yield 0, len(uniques)
            return
        normal_keys(keys, spill.what)
        yield from spill.pages(self.backend, uniques, self.owned_key_groups(uniques))

    def owned_key_groups(self, keys: list[Any] | pa.Array) -> np.ndarray:
        """The key group of every key; a key outside the subtask's range raises KeyOutOfRangeError."""
        if not len(keys):
            return np.zeros(0, dtype=np.int32)
        groups = key_groups(
            keys if isinstance(keys, pa.Array) else pa.array(keys), self.backend.max_parallelism
        )
        outside = np.nonzero(
            (groups < self.backend.key_groups.first) | (groups > self.backend.key_groups.last)
        )[0]
        if len(outside):
            bad = keys[int(outside[0])]
            self.backend.set_current_key(
                bad.as_py() if isinstance(bad, pa.Scalar) else bad
            )  # raises KeyOutOfRangeError
        return groups

    def register_states(self) -> None:
        """Touch every state descriptor once so snapshots list it even when empty."""

    def restore_extra(self, extra: dict[str, Any]) -> None:
        return None

    def keys_of(self, batch: pa.RecordBatch) -> pa.Array:
        return key_column(batch, self.key)

    def process_watermark(self, timestamp: int) -> None:
        self.timers.advance_watermark(timestamp)
        self.flush_timer_output()
        self.out.emit_watermark(timestamp)

    def flush_timer_output(self) -> None:
        """Emit what timers produced during one ``advance_watermark`` as one batch."""

    def on_event_time(self, timer: InternalTimer[Any, Any]) -> None:
        return None

    def on_processing_time(self, timer: InternalTimer[Any, Any]) -> None:
        return None

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        if self.spill is not None:
            part = self.spill.snapshot()
            self._spill_part = part
            return OperatorSnapshot(None, self.timers.snapshot(), self.snapshot_extra(), part)
        return OperatorSnapshot(
            self.backend.snapshot(checkpoint_id), self.timers.snapshot(), self.snapshot_extra()
        )

    def snapshot_extra(self) -> dict[str, Any]:
        return {}
