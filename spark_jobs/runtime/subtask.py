"""One subtask of one stage in one epoch: open (restore), run, snapshot at barrier n, acknowledge.

::

    open_subtask(plan, stage, i)   the I/O before any input: open the store, read the restore
                                   checkpoint's metadata (verified once per process), build the
                                   operator chain (``operators/build.py``), restore every stateful
                                   operator's key groups (any old parallelism), begin the sinks'
                                   transactions -- all inside one GC pause      -> SubtaskParts
    SourceSubtask / KeyedSubtask   run the input (``source_subtask.py``, ``keyed_subtask.py``)
    barrier n -> take_snapshot     prepare_snapshot_pre_barrier -> synchronous snapshot ->
                                   pre-commit sinks -> forward barrier -> asynchronous upload
    end of input -> acknowledge    wait for uploads -> [after_state_upload] -> acks (``acks.py``)
    dispose                        drop the state inside the GC pause (``gcpause``)

Acks carry the generation and attempt of the plan; a zombie's acks are therefore UNKNOWN to the
coordinator, and its sink files are never listed in a commit.

Invariants: a subtask's constructor does no I/O (``open_subtask`` did it); a subtask snapshots at
most once per epoch, for the plan's checkpoint id only (later or other barriers are ignored); it
acknowledges either every expected uid or declines every one, with a single reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.api.specs import SideOutput, SinkSpec
from spark_jobs.runtime import keys, warm
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.acks import NOT_READY, AckSite, SinkAck, StateAck, Timing
from spark_jobs.runtime.chain import OperatorChain, Route, StageExit
from spark_jobs.runtime.channel_state import ChannelStateRef
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.memory import current_metrics
from spark_jobs.runtime.operators.base import OperatorContext, OperatorSnapshot
from spark_jobs.runtime.operators.build import build_chain_operators, builds_operator
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.state_io import (
    RestoredKeyGroup,
    WrittenSnapshot,
    adopted_bases,
    read_operator_restore,
    write_operator_snapshot,
)
from spark_jobs.runtime.subtask_sinks import CHAIN_END, SubtaskSinks
from state_store.core import killpoints
from state_store.core.completed import load_completed
from state_store.core.keygroups import KeyGroupRange, key_group_range_for_subtask
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata
from state_store.core.ports import KillSwitch, ObjectStore
from state_store.core.responder import TaskCheckpointResponder
from state_store.core.stream import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    CheckpointType,
)
from state_store.faults import arm
from state_store.storage import open_store

_metadata_cache: dict[tuple[str, int], CompletedMetadata] = {}
_cache_lock = threading.Lock()


def restore_metadata(store: ObjectStore, plan: EpochPlan) -> CompletedMetadata | None:
    """The completed checkpoint this epoch restores from (verified once per process)."""
    if plan.restore_id is None:
        return None
    key = (plan.store_uri + "|" + plan.job.job_id, plan.restore_id)
    with _cache_lock:
        if key not in _metadata_cache:
            while len(_metadata_cache) >= 4:  # bounded: one epoch needs one entry
                _metadata_cache.pop(next(iter(_metadata_cache)))
            _metadata_cache[key] = load_completed(store, JobLayout(plan.job.job_id), plan.restore_id).metadata
        return _metadata_cache[key]


@dataclass(frozen=True)
class SubtaskParts:
    """What ``open_subtask`` read and built: everything a subtask runs with."""

    plan: EpochPlan
    stages: list[Stage]
    stage: Stage
    subtask: int
    store: ObjectStore
    kill: KillSwitch
    responder: TaskCheckpointResponder
    key_groups: KeyGroupRange
    metadata: CompletedMetadata | None
    chain: OperatorChain
    sinks: SubtaskSinks
    restored_bases: dict[str, dict[int, RestoredKeyGroup]]
    """Per stateful operator uid, the restored files its next snapshot may reference (incremental)."""
    timing: Timing
    warm_key: warm.WarmKey | None = None
    """Where this subtask's operators are kept after its acks (``Job.local_recovery``), else None."""
    adopted: bool = False
    """The operators are the previous epoch's, adopted by local recovery (``spark_jobs.runtime.warm``)."""
    logic: str | None = None
    """``warm.logic_of`` the stage's operator steps (local recovery only)."""


def _stored_bases(
    store: ObjectStore, metadata: CompletedMetadata, uid: str, key_groups: KeyGroupRange
) -> dict[int, RestoredKeyGroup]:
    """An adopted heap operator's incremental bases read from the store (``adopted_bases``)."""
    return read_operator_restore(store, metadata, uid, key_groups)[1]


def _route(stages: list[Stage], stage: Stage, subtask: int, plan: EpochPlan) -> Route | None:
    consumer = topo.consumer_of(stages, stage)
    if consumer is None:
        return None
    job = plan.job
    key = consumer.input_keys[consumer.inputs.index(stage.index)]
    channel = topo.channel_offset(stages, consumer, stage, job) + subtask
    return Route(key, channel, topo.width(consumer, job), job.max_parallelism, job.parallelism)


def _stage_sinks(stage: Stage) -> tuple[list[tuple[int, str, Any]], dict[str, SideOutput]]:
    """The stage's sinks (chain position they tap, uid, sink spec; in step order) and its side
    outputs by tag (a later one of a tag wins). A sink taps the output of its input step: the
    position after the operators built up to that step, ``CHAIN_END`` after the last one."""
    built = 0
    after: dict[int, int] = {}
    for step in stage.steps:
        if builds_operator(step.spec):
            built += 1
        after[id(step)] = built
    taps = [
        (after[id(step.inputs[0])], step.uid or "", step.spec.sink)
        for step in stage.steps
        if isinstance(step.spec, SinkSpec)
    ]
    taps = [(CHAIN_END if position == built else position, uid, spec) for position, uid, spec in taps]
    side = {output.tag: output for step in stage.steps for output in step.side_outputs()}
    return taps, side


def _open_operators(
    store: ObjectStore,
    chain: OperatorChain,
    ctx: OperatorContext,
    metadata: CompletedMetadata | None,
    key_groups: KeyGroupRange,
    kept: warm.WarmChain | None,
    job: Any,
) -> tuple[dict[str, dict[int, RestoredKeyGroup]], Timing]:
    """Restore (or, with ``kept``, adopt) every operator of the chain: per stateful uid the restored
    files its next snapshot may reference, and the time it took."""
    bases: dict[str, dict[int, RestoredKeyGroup]] = {}
    timing = Timing()
    with gc_paused():  # restore: many long-lived objects, no cyclic garbage (gcpause docstring)
        for op in chain.ops:
            restored = None
            began = time.perf_counter()
            if kept is not None:
                assert metadata is not None
                op.reopen(ctx, metadata.checkpoint_id)
                if op.stateful and op.uid:
                    snap = kept.snapshots.get(op.uid)
                    load = partial(_stored_bases, store, metadata, op.uid, key_groups)
                    bases[op.uid] = adopted_bases(
                        metadata, op.uid, key_groups, snap.keyed if snap is not None else None, load
                    )
                timing.restore_s += time.perf_counter() - began
                continue
            if op.stateful and op.uid:
                spill_native = job.state_memory_mb is not None and bool(getattr(op, "can_spill", False))
                restored, base = read_operator_restore(
                    store,
                    metadata,
                    op.uid,
                    key_groups,
                    int_rows=bool(getattr(op, "columnar_restore", False)) and not spill_native,
                    spill_native=spill_native,
                )
                bases[op.uid] = base
            op.open(ctx, restored)
            timing.restore_s += time.perf_counter() - began
    return bases, timing


def open_subtask(plan: EpochPlan, stage_index: int, subtask: int) -> SubtaskParts:
    """Open subtask ``subtask`` of stage ``stage_index``: the I/O of the module docstring's first step."""
    job = plan.job
    stages = plan.stages()
    stage = stages[stage_index]
    store = open_store(plan.store_uri)
    kill = arm(plan.kill)
    key_groups = (
        key_group_range_for_subtask(job.max_parallelism, job.parallelism, subtask)
        if stage.key is not None
        else KeyGroupRange(0, job.max_parallelism - 1)
    )
    ctx = OperatorContext(
        job.job_id,
        subtask,
        topo.width(stage, job),
        job.max_parallelism,
        key_groups,
        plan.trigger_ms,
        plan.checkpoint_id,
        job.state_memory_mb,
        job.state_dir,
    )
    metadata = restore_metadata(store, plan)
    keys.limit_key_group_cache(job.state_memory_mb)
    sinks = SubtaskSinks(subtask, plan.attempt, plan.generation)
    ops = build_chain_operators(stage)
    decision = None
    if job.local_recovery and warm.enabled_here():
        logic = warm.logic_of(
            [step.spec for step in stage.steps if builds_operator(step.spec)],
            (stage.key, tuple(stage.input_keys), job.state_memory_mb),
        )
        width = topo.width(stage, job)
        key = warm.WarmKey(
            plan.store_uri, job.job_id, stage_index, subtask, width, job.max_parallelism, key_groups
        )
        decision = warm.decide(key, logic, metadata, subtask, ops)
    kept = decision.kept if decision is not None else None
    if kept is not None:
        ops = kept.ops
    chain = OperatorChain(ops, StageExit(sinks, _route(stages, stage, subtask, plan)))
    try:
        bases, timing = _open_operators(store, chain, ctx, metadata, key_groups, kept, job)
        with gc_paused():
            taps, side = _stage_sinks(stage)
            sinks.open(store, job.job_id, plan.checkpoint_id, taps, side)
    except BaseException:
        with contextlib.suppress(Exception):  # the restore's own error is the one to report
            chain.dispose()  # operators opened so far release what they hold (a spill directory)
        raise
    responder = TaskCheckpointResponder(store, job.job_id, kill=kill)
    return SubtaskParts(
        plan,
        stages,
        stage,
        subtask,
        store,
        kill,
        responder,
        key_groups,
        metadata,
        chain,
        sinks,
        bases,
        timing,
        decision.key if decision is not None else None,
        kept is not None,
        decision.logic if decision is not None else None,
    )


class SubtaskRunner:
    """Snapshot and acknowledgement shared by source and keyed subtasks (module docstring)."""

    def __init__(self, parts: SubtaskParts) -> None:
        self.plan = parts.plan
        self.job = parts.plan.job
        self.stages = parts.stages
        self.stage = parts.stage
        self.subtask = parts.subtask
        self.store = parts.store
        self.kill = parts.kill
        self.responder = parts.responder
        self.key_groups = parts.key_groups
        self.metadata = parts.metadata
        self.chain = parts.chain
        self.exit = parts.chain.exit
        self.sinks = parts.sinks
        self.base_files = parts.restored_bases
        self.timing = parts.timing
        self.warm_key = parts.warm_key
        self.adopted = parts.adopted
        self.logic = parts.logic
        self._snapshots: dict[str, OperatorSnapshot] = {}
        self._events_at_snapshot = -1
        self._keep: warm.WarmChain | None = None
        self.layout = JobLayout(self.job.job_id)
        self.site = AckSite(
            checkpoint_id=self.plan.checkpoint_id,
            subtask=self.subtask,
            generation=self.plan.generation,
            attempt=self.plan.attempt,
        )
        self.uploads: dict[str, Future[WrittenSnapshot]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.snapshot_taken = False
        self.declined: str | None = None
        self.alignment_ms: float | None = None
        """The barrier handler's alignment duration; None for sources (no input barrier)."""

    def expected_uids(self) -> list[str]:
        return [op.uid for op in self.chain.stateful if op.uid] + self.sinks.uids

    def anchor(self) -> str | None:
        """The uid whose ack references the subtask's channel state (``channel_state``)."""
        uids = self.expected_uids()
        return uids[0] if uids else None

    # -- checkpointing -------------------------------------------------------------------------
    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: Any, metrics: Any
    ) -> None:
        """Barrier n is aligned (or first, when unaligned): snapshot, pre-commit, forward. The
        handler's alignment duration goes into every ack of this subtask (the
        Checkpoints view shows the longest alignment of a checkpoint)."""
        if metrics is not None:
            # (not the start delay: the trigger timestamp is on the epoch's clock, simulated in tests)
            self.alignment_ms = round(metrics.alignment_duration_ns / 1e6, 3)
        self.take_snapshot(checkpoint_id, timestamp, options)

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: Any) -> None:
        self.declined = f"{getattr(reason, 'name', reason)}"
        self.exit.broadcast(CancelCheckpointMarker(checkpoint_id))

    def take_snapshot(self, checkpoint_id: int, timestamp: int, options: Any) -> None:
        if checkpoint_id != self.plan.checkpoint_id or self.snapshot_taken:
            return
        self.snapshot_taken = True
        began = time.perf_counter()
        for op in self.chain.ops:
            op.prepare_snapshot_pre_barrier(checkpoint_id)
        snapshots = {op.uid: op.snapshot(checkpoint_id) for op in self.chain.stateful if op.uid}
        self._events_at_snapshot = self.chain.events
        if self.warm_key is not None:
            # a columnar operator's snapshot is a few Arrow arrays; a heap backend's is a frozen copy
            # of every entry, which costs more to keep than re-reading its files when needed
            self._snapshots = {uid: snap for uid, snap in snapshots.items() if uid in self._columnar_uids()}
        self.sinks.pre_commit(checkpoint_id)
        self.timing.snapshot_sync_s += time.perf_counter() - began
        self.exit.broadcast(CheckpointBarrier(checkpoint_id, timestamp, options))
        if snapshots and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="epochal-upload")
        for uid, snap in snapshots.items():
            assert self._pool is not None
            self.uploads[uid] = self._pool.submit(
                write_operator_snapshot, self.store, self.layout, uid, snap, self.base_files.get(uid, {})
            )

    def _columnar_uids(self) -> set[str]:
        """Stateful operators whose state is in columns now (not on the heap backend)."""
        return {
            op.uid
            for op in self.chain.stateful
            if op.uid and getattr(op, "columnar_restore", False) and getattr(op, "fallback", None) is None
        }

    def channel_state(self) -> ChannelStateRef | None:
        """The uploaded channel state of checkpoint n (unaligned keyed subtasks only)."""
        return None

    def acknowledge(self) -> list[dict[str, Any]]:
        """Wait for the uploads, then write one ack (or decline) per stateful operator and sink."""
        began = time.perf_counter()
        try:
            written = {uid: f.result() for uid, f in self.uploads.items()}
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        self.timing.upload_wait_s += time.perf_counter() - began
        if self.declined is not None or not self.snapshot_taken:
            reason = self.declined or NOT_READY
            for uid in self.expected_uids():
                self.responder.decline(self.site.decline(uid, reason))
            return [{"declined": reason}]
        self.kill(killpoints.AFTER_STATE_UPLOAD, self.plan.checkpoint_id)
        metrics = self.chain.metrics()
        memory = current_metrics()
        channel_state = self.channel_state()
        anchor = self.anchor() if channel_state is not None else None
        summaries: list[dict[str, Any]] = []
        recovery = {} if self.warm_key is None else {"local_recovery": "adopted" if self.adopted else "store"}
        kept: dict[str, warm.KeptAck] = {}
        for op in self.chain.stateful:
            assert op.uid is not None
            ack = StateAck(
                op.uid,
                written[op.uid],
                self.timing,
                self.alignment_ms,
                {**recovery, **metrics.get(op.uid, {})},
                channel_state if op.uid == anchor else None,
                memory,
            )
            record = ack.record(self.site)
            self.responder.acknowledge(record)
            if self.warm_key is not None:
                kept[op.uid] = warm.kept_ack(record.attempt, record.handles, record.snapshot)
            summaries.append(ack.summary(self.subtask))
        if self.warm_key is not None and self.chain.events == self._events_at_snapshot:
            self._keep = warm.WarmChain(
                self.plan.checkpoint_id, self.chain.ops, kept, self._snapshots, self.logic
            )
        for uid, txn in self.sinks.pre_committed.items():
            sink_ack = SinkAck(
                uid,
                txn,
                self.alignment_ms,
                channel_state if uid == anchor else None,
                in_job_store=self.sinks.sinks[uid].stages_in_job_store,
                memory=memory,
            )
            self.responder.acknowledge(sink_ack.record(self.site))
        self.sinks.abort_open()
        summaries.append(
            {
                "stage": self.stage.index,
                "subtask": self.subtask,
                "rows_in": self.chain.rows_in,
                "rows_out": self.exit.rows_out,
                "side_dropped": self.exit.side_dropped,
            }
        )
        return summaries

    def dispose(self) -> None:
        """After the acks: drop the state structures (operators' backends, the restored bases)
        inside the GC pause, so reference counting frees them instead of the cyclic collector
        traversing them when the pause ends (``gcpause`` docstring). With local recovery the
        operators are kept instead (``spark_jobs.runtime.warm``)."""
        if self.warm_key is not None and self._keep is not None:
            warm.keep(self.warm_key, self._keep)
            self._keep = None
        else:
            self.chain.dispose()
        self.base_files.clear()
        self.uploads.clear()

    def abandon(self) -> None:
        """The subtask failed: release its operators (a spill store's local directory with them)
        instead of keeping them for local recovery; the next attempt restores from the store."""
        self._keep = None
        with contextlib.suppress(Exception):  # the failure itself is the one to report
            self.chain.dispose()
        self.base_files.clear()
        self.uploads.clear()

    def options(self) -> CheckpointOptions:
        ctype = CheckpointType.SAVEPOINT if self.plan.savepoint else CheckpointType.CHECKPOINT
        return CheckpointOptions(ctype, self.job.mode == "unaligned")

    def result(self, summaries: list[dict[str, Any]]) -> list[Any]:
        """What the subtask returns: its messages to the next stage, or (terminal) its summaries."""
        return list(self.exit.outbox) if self.exit.route is not None else summaries
