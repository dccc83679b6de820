"""One subtask of one stage in one epoch: restore, consume, snapshot at barrier n, acknowledge.

Source stage subtask (one per source partition)::

    restore watermark state -> emit the restored watermark (and IDLE if the partition has no input)
    read [start, end) in chunks -> add ``_ts`` -> operator chain -> watermark after every chunk
    (drain: MAX watermark) -> barrier n -> snapshot -> end of partition

Keyed stage subtask (owns a key-group range)::

    restore keyed state + timers of its key groups (any old parallelism)
    rebuild every input channel from the shuffle (sorted by (channel, seq)); a channel simply runs
    dry at the end of the epoch -- no end-of-partition is sent, because the stream continues in the
    next epoch (an end-of-partition would make the at-least-once tracker abort, as Flink 1.11 does
    for a finished input)
    CheckpointedInputGate(handler by mode) -> StatusWatermarkValve -> operator chain
    barrier n (aligned: all channels) -> prepare_snapshot_pre_barrier -> synchronous snapshot ->
    pre-commit sinks -> forward barrier -> asynchronous upload on a thread pool
    end of input -> wait for uploads -> [after_state_upload] -> acks ([before_ack], [after_ack])

Acks carry the generation and attempt of the plan; a zombie's acks are therefore UNKNOWN to the
coordinator, and its sink files are never listed in a commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.api.graph import Stage, Step
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.keys import key_column, key_groups, split_by, subtasks_of_key_groups
from spark_jobs.runtime.messages import Message, from_message, to_message
from spark_jobs.runtime.operators.async_io import AsyncEnrichOperator
from spark_jobs.runtime.operators.base import FilterOperator, MapOperator, Operator, OperatorContext
from spark_jobs.runtime.operators.dedup import DeduplicateOperator
from spark_jobs.runtime.operators.process import CoProcessOperator, ProcessOperator
from spark_jobs.runtime.operators.window import TS, WindowOperator
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.state_io import (
    RestoredKeyGroup,
    WrittenSnapshot,
    read_operator_restore,
    write_operator_snapshot,
)
from spark_jobs.sources.base import event_time_ms
from spark_jobs.sources.dead_letters import DeadLetterReason, DeadLetters
from state_store.core import killpoints
from state_store.core.codec import sha256_hex
from state_store.core.completed import load_completed
from state_store.core.keygroups import KeyGroupRange, key_group_range_for_subtask
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckRecord, CompletedMetadata, DeclineRecord, StateHandle, TaskId
from state_store.core.ports import ObjectStore
from state_store.core.responder import TaskCheckpointResponder
from state_store.core.stream import (
    MAX_TIMESTAMP,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointedInputGate,
    CheckpointOptions,
    CheckpointType,
    InputWatermarkCombiner,
    ScriptedChannel,
    StatusWatermarkValve,
    StreamStatus,
    Watermark,
    create_barrier_handler,
)
from state_store.core.twophase import PreCommittedTxn, sink_snapshot
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


class _Link:
    """Output of operator i = input of operator i + 1."""

    def __init__(self, task: SubtaskRunner, nxt: Operator) -> None:
        self.task, self.nxt = task, nxt

    def emit(self, batch: pa.RecordBatch) -> None:
        self.nxt.process_batch(batch)

    def emit_watermark(self, timestamp: int) -> None:
        self.nxt.process_watermark(timestamp)

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        self.task.side(tag, batch)


class _Exit:
    """Output of the last operator: a sink, the next stage (by key), or nothing."""

    def __init__(self, task: SubtaskRunner) -> None:
        self.task = task

    def emit(self, batch: pa.RecordBatch) -> None:
        self.task.emit_out(batch)

    def emit_watermark(self, timestamp: int) -> None:
        self.task.forward_watermark(timestamp)

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        self.task.side(tag, batch)


class _ValveOut:
    """Output of input i's valve: into the N-input combiner (combined watermark = min of inputs,
    emitted when it advances) and the combined status (IDLE only when every input is idle)."""

    def __init__(
        self, task: SubtaskRunner, combiner: InputWatermarkCombiner, statuses: list[StreamStatus], index: int
    ) -> None:
        self.task, self.combiner, self.statuses, self.index = task, combiner, statuses, index

    def emit_watermark(self, watermark: Watermark) -> None:
        combined = self.combiner.report_watermark(watermark, self.index)
        if combined is not None:
            self.task.chain_watermark(combined.timestamp)

    def emit_stream_status(self, status: StreamStatus) -> None:
        before = all(s is StreamStatus.IDLE for s in self.statuses)
        self.statuses[self.index] = status
        after = all(s is StreamStatus.IDLE for s in self.statuses)
        if before != after:
            self.task.forward_status(StreamStatus.IDLE if after else StreamStatus.ACTIVE)


class SubtaskRunner:
    """State and wiring shared by source and keyed subtasks (see module docstring)."""

    def __init__(self, plan: EpochPlan, stage_index: int, subtask: int) -> None:
        self.plan = plan
        self.job = plan.job
        self.stages = plan.stages()
        self.stage: Stage = self.stages[stage_index]
        self.subtask = subtask
        self.store = open_store(plan.store_uri)
        self.layout = JobLayout(self.job.job_id)
        self.kill = arm(plan.kill)
        self.responder = TaskCheckpointResponder(self.store, self.job.job_id, kill=self.kill)
        self.consumer = topo.consumer_of(self.stages, self.stage)
        self.outbox: list[tuple[int, Message]] = []
        self.seq = 0
        self.last_wm = -(2**63)
        keyed = self.stage.key is not None
        self.key_groups = (
            key_group_range_for_subtask(self.job.max_parallelism, self.job.parallelism, subtask)
            if keyed
            else KeyGroupRange(0, self.job.max_parallelism - 1)
        )
        self.ctx = OperatorContext(
            self.job.job_id,
            subtask,
            topo.width(self.stage, self.job),
            self.job.max_parallelism,
            self.key_groups,
            plan.trigger_ms,
            plan.checkpoint_id,
        )
        self.metadata = restore_metadata(self.store, plan)
        self.ops = [self._operator(step) for step in self.stage.steps if step.kind in _OPERATOR_KINDS]
        self.sink_step = next((s for s in self.stage.steps if s.kind == "sink"), None)
        self.side_sinks: dict[str, tuple[str, Any]] = {}
        for step in self.stage.steps:
            if step.kind == "window" and step.spec.get("late_output") is not None:
                self.side_sinks["late"] = (f"{step.uid}-late", step.spec["late_output"])
        self.sinks: dict[str, Any] = {}
        self.txns: dict[str, Any] = {}
        self.pre_committed: dict[str, PreCommittedTxn] = {}
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="epochal-upload")
        self.uploads: dict[str, Future[WrittenSnapshot]] = {}
        self.base_files: dict[str, dict[int, RestoredKeyGroup]] = {}
        self.snapshot_taken = False
        self.declined: str | None = None
        self.rows_in = 0
        self.rows_out = 0
        self.side_dropped: dict[str, int] = {}
        self.timing: dict[str, float] = {"restore_s": 0.0, "snapshot_sync_s": 0.0, "upload_wait_s": 0.0}
        #: alignment_ms of the barrier handler; empty for sources (no input barrier)
        self.barrier_metrics: dict[str, float] = {}
        with gc_paused():  # restore: many long-lived objects, no cyclic garbage (gcpause docstring)
            self._wire()

    # -- construction --------------------------------------------------------------------------
    def _operator(self, step: Step) -> Operator:
        key = self.stage.key
        if step.kind == "map":
            return MapOperator(step.spec["fn"])
        if step.kind == "filter":
            return FilterOperator(step.spec["fn"])
        if step.kind == "async":
            spec = step.spec
            return AsyncEnrichOperator(
                spec["fn"],
                ordered=spec["ordered"],
                capacity=spec["capacity"],
                timeout_ms=spec["timeout_ms"],
                on_timeout=spec["on_timeout"],
            )
        assert step.uid is not None and key is not None
        if step.kind == "window":
            return WindowOperator(
                step.uid, key, step.spec["assigner"], step.spec["aggregate"], step.spec["allowed_lateness_ms"]
            )
        if step.kind == "dedup":
            return DeduplicateOperator(step.uid, key, step.spec["ttl_ms"])
        if step.kind == "process":
            return ProcessOperator(step.uid, key, step.spec["fn"])
        if step.kind == "connect":
            return CoProcessOperator(step.uid, self.stage.input_keys, step.spec["fn"])
        raise ValueError(f"unknown step kind {step.kind!r}")

    def _wire(self) -> None:
        for op, nxt in zip(self.ops, self.ops[1:]):
            op.output = _Link(self, nxt)
        if self.ops:
            self.ops[-1].output = _Exit(self)
        for op in self.ops:
            restored = None
            began = time.perf_counter()
            if op.stateful and op.uid:
                restored, base = read_operator_restore(
                    self.store,
                    self.metadata,
                    op.uid,
                    self.key_groups,
                    int_rows=bool(getattr(op, "columnar_restore", False)),
                )
                self.base_files[op.uid] = base
            op.open(self.ctx, restored)
            self.timing["restore_s"] += time.perf_counter() - began
        if self.sink_step is not None:
            self._open_sink(self.sink_step.uid or "", self.sink_step.spec["sink"])
        for uid, spec in self.side_sinks.values():
            self._open_sink(uid, spec)

    def _open_sink(self, uid: str, spec: Any) -> None:
        sink = spec.create(self.store, self.job.job_id, uid)
        self.sinks[uid] = sink
        self.txns[uid] = sink.begin_transaction(
            self.plan.checkpoint_id, self.subtask, self.plan.attempt, self.plan.generation
        )

    # -- data path -----------------------------------------------------------------------------
    def push(self, batch: pa.RecordBatch, input_index: int = 0) -> None:
        self.rows_in += batch.num_rows
        first = self.ops[0] if self.ops else None
        if isinstance(first, CoProcessOperator):
            first.process_input(batch, input_index)
        elif first is not None:
            first.process_batch(batch)
        else:
            self.emit_out(batch)

    def chain_watermark(self, timestamp: int) -> None:
        if self.ops:
            self.ops[0].process_watermark(timestamp)
        else:
            self.forward_watermark(timestamp)

    def emit_out(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows_out += batch.num_rows
        if self.sink_step is not None:
            uid = self.sink_step.uid or ""
            self.sinks[uid].write(self.txns[uid], batch)
            return
        if self.consumer is None:
            return
        consumer = self.consumer
        key = consumer.input_keys[consumer.inputs.index(self.stage.index)]
        groups = key_groups(key_column(batch, key), self.job.max_parallelism)
        targets = subtasks_of_key_groups(groups, self.job.max_parallelism, self.job.parallelism)
        for dest, part in enumerate(split_by(batch, targets, self.job.parallelism)):
            if part is not None:
                self._send(dest, part)

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        if tag in self.side_sinks:
            uid, _ = self.side_sinks[tag]
            self.sinks[uid].write(self.txns[uid], batch)
        else:
            self.side_dropped[tag] = self.side_dropped.get(tag, 0) + batch.num_rows

    def forward_watermark(self, timestamp: int) -> None:
        if timestamp > self.last_wm:
            self.last_wm = timestamp
            self._broadcast(Watermark(timestamp))

    def forward_status(self, status: StreamStatus) -> None:
        self._broadcast(status)

    def _send(self, dest: int, item: object) -> None:
        if self.consumer is None:
            return
        channel = topo.channel_offset(self.stages, self.consumer, self.stage, self.job) + self.subtask
        self.outbox.append((dest, to_message(channel, self.seq, item)))
        self.seq += 1

    def _broadcast(self, item: object) -> None:
        if self.consumer is not None:
            for dest in range(topo.width(self.consumer, self.job)):
                self._send(dest, item)

    # -- checkpointing -------------------------------------------------------------------------
    def expected_uids(self) -> list[str]:
        uids = [op.uid for op in self.ops if op.stateful and op.uid]
        return uids + list(self.sinks)

    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: Any, metrics: Any
    ) -> None:
        """Barrier n is aligned (or first, when unaligned): snapshot, pre-commit, forward. The
        handler's alignment duration goes into every ack of this subtask (the
        Checkpoints view shows the longest alignment of a checkpoint)."""
        if metrics is not None:
            # (not the start delay: the trigger timestamp is on the epoch's clock, simulated in tests)
            self.barrier_metrics = {"alignment_ms": round(metrics.alignment_duration_ns / 1e6, 3)}
        self.take_snapshot(checkpoint_id, timestamp, options)

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: Any) -> None:
        self.declined = f"{getattr(reason, 'name', reason)}"
        self._broadcast(CancelCheckpointMarker(checkpoint_id))

    def take_snapshot(self, checkpoint_id: int, timestamp: int, options: Any) -> None:
        if checkpoint_id != self.plan.checkpoint_id or self.snapshot_taken:
            return
        self.snapshot_taken = True
        began = time.perf_counter()
        for op in self.ops:
            op.prepare_snapshot_pre_barrier(checkpoint_id)
        snapshots = {op.uid: op.snapshot(checkpoint_id) for op in self.ops if op.stateful and op.uid}
        for uid, sink in self.sinks.items():
            self.pre_committed[uid] = sink.pre_commit(self.txns[uid])
            # records after an unaligned barrier belong to the next epoch: they go nowhere visible
            self.txns[uid] = sink.begin_transaction(
                checkpoint_id + 1, self.subtask, self.plan.attempt, self.plan.generation
            )
        self.timing["snapshot_sync_s"] += time.perf_counter() - began
        self._broadcast(CheckpointBarrier(checkpoint_id, timestamp, options))
        for uid, snap in snapshots.items():
            self.uploads[uid] = self.pool.submit(
                write_operator_snapshot, self.store, self.layout, uid, snap, self.base_files.get(uid, {})
            )

    def extra_snapshot(self) -> dict[str, Any]:
        return {}

    def channel_state_handles(self) -> tuple[list[StateHandle], dict[str, Any]]:
        return [], {}

    def acknowledge(self) -> list[dict[str, Any]]:
        """Wait for the uploads, then write one ack (or decline) per stateful operator and sink."""
        n, gen, attempt = self.plan.checkpoint_id, self.plan.generation, self.plan.attempt
        summaries: list[dict[str, Any]] = []
        began = time.perf_counter()
        try:
            written = {uid: f.result() for uid, f in self.uploads.items()}
        finally:
            self.pool.shutdown(wait=True)
        self.timing["upload_wait_s"] += time.perf_counter() - began
        if self.declined is not None or not self.snapshot_taken:
            reason = self.declined or "CHECKPOINT_DECLINED_TASK_NOT_READY"
            for uid in self.expected_uids():
                self.responder.decline(DeclineRecord(n, TaskId(uid, self.subtask), gen, attempt, reason))
            return [{"declined": reason}]
        self.kill(killpoints.AFTER_STATE_UPLOAD, n)
        metrics = {op.uid: op.metrics() for op in self.ops if op.uid}
        channel_handles, channel_snapshot = self.channel_state_handles()
        for op in self.ops:
            if not (op.stateful and op.uid):
                continue
            w = written[op.uid]
            snapshot = {**w.snapshot, **self.extra_snapshot()}
            handles = list(w.handles)
            if op.uid == self.expected_uids()[0] and channel_snapshot:
                snapshot.update(channel_snapshot)
                handles.extend(channel_handles)
            self.responder.acknowledge(
                AckRecord(
                    n,
                    TaskId(op.uid, self.subtask),
                    gen,
                    attempt,
                    tuple(handles),
                    metrics={
                        "bytes_written": w.bytes_written,
                        "files_written": w.files_written,
                        "state_files": len(w.handles),
                        **{k: round(v, 6) for k, v in self.timing.items()},
                        **self.barrier_metrics,
                        **metrics.get(op.uid, {}),
                    },
                    snapshot=snapshot,
                )
            )
            summaries.append({"uid": op.uid, "subtask": self.subtask, "bytes_written": w.bytes_written})
        for uid, record in self.pre_committed.items():
            sink_handles, sink_snap = list(record.files), sink_snapshot([record])
            if uid == self.expected_uids()[0] and channel_snapshot:  # no stateful step: the sink anchors it
                sink_snap.update(channel_snapshot)
                sink_handles.extend(channel_handles)
            self.responder.acknowledge(
                AckRecord(
                    n,
                    TaskId(uid, self.subtask),
                    gen,
                    attempt,
                    tuple(sink_handles),
                    metrics={"rows": record.rows, **self.barrier_metrics},
                    snapshot=sink_snap,
                )
            )
        for uid, sink in self.sinks.items():
            sink.abort(self.txns[uid])  # the post-barrier transaction (empty unless unaligned)
        summaries.append(
            {
                "stage": self.stage.index,
                "subtask": self.subtask,
                "rows_in": self.rows_in,
                "rows_out": self.rows_out,
                "side_dropped": self.side_dropped,
            }
        )
        return summaries

    def dispose(self) -> None:
        """After the acks: drop the state structures (operators' backends, the restored bases)
        inside the GC pause, so reference counting frees them instead of the cyclic collector
        traversing them when the pause ends (``gcpause`` docstring)."""
        for op in self.ops:
            op.dispose()
        self.base_files.clear()
        self.uploads.clear()

    def options(self) -> CheckpointOptions:
        ctype = CheckpointType.SAVEPOINT if self.plan.savepoint else CheckpointType.CHECKPOINT
        return CheckpointOptions(ctype, self.job.mode == "unaligned")


_OPERATOR_KINDS = {"map", "filter", "async", "window", "dedup", "process", "connect"}


class SourceSubtask(SubtaskRunner):
    """Reads one source partition for the epoch (module docstring)."""

    def __init__(self, plan: EpochPlan, stage_index: int, subtask: int) -> None:
        super().__init__(plan, stage_index, subtask)
        step = self.stage.steps[0]
        self.source = step.spec["source"]
        self.source_uid = step.uid or self.source.uid
        self.partition = topo.source_partitions(self.stage)[subtask]
        self.ooo = int(step.spec.get("out_of_orderness_ms") or 0)
        self.idleness = step.spec.get("idleness_ms")
        self.max_ts: int | None = None
        self.dead = DeadLetters()
        for entry in self._source_entries():
            if entry.get("partition") == self.partition:
                self.max_ts = entry.get("max_ts")

    def _source_entries(self) -> list[dict[str, Any]]:
        if self.metadata is None:
            return []
        return [t.snapshot.get("source", {}) for t in self.metadata.tasks if t.task.uid == self.source_uid]

    def expected_uids(self) -> list[str]:
        return [self.source_uid, *super().expected_uids()]

    def _watermark(self) -> int | None:
        return None if self.max_ts is None else self.max_ts - self.ooo - 1

    def run(self) -> Iterator[Any]:
        with gc_paused():
            out = self._run()
        yield from out

    def _run(self) -> list[Any]:
        start, end = topo.source_position(self.plan, self.source_uid, self.partition)
        restored_wm = self._watermark()
        if restored_wm is not None:
            self.chain_watermark(restored_wm)
        if start >= end and self.idleness is not None and not self.plan.drain:
            self.forward_status(StreamStatus.IDLE)
        chunks = self.source.read(
            self.partition, start, end, chunk_size=self.job.chunk_size, dead_letters=self.dead
        )
        for batch in chunks:
            if batch.num_rows == 0:
                continue
            ts = event_time_ms(batch, self.source.event_time_column)
            batch = batch.append_column(TS, pa.array(np.asarray(ts, dtype=np.int64), pa.int64()))
            self.max_ts = int(ts.max()) if self.max_ts is None else max(self.max_ts, int(ts.max()))
            self.push(batch)
            wm = self._watermark()
            if wm is not None:
                self.chain_watermark(wm)
        if self.plan.drain:
            self.chain_watermark(MAX_TIMESTAMP)
        self.take_snapshot(self.plan.checkpoint_id, self.plan.trigger_ms, self.options())
        summaries = self.acknowledge()
        if self.declined is None:
            self.responder.acknowledge(
                AckRecord(
                    self.plan.checkpoint_id,
                    TaskId(self.source_uid, self.subtask),
                    self.plan.generation,
                    self.plan.attempt,
                    (),
                    metrics={"records": end - start, "dead_letters": self.dead.total},
                    snapshot={
                        "source": {"partition": self.partition, "max_ts": self.max_ts, "position": end},
                        "dead_letters": {
                            r.name: self.dead.count(r) for r in DeadLetterReason if self.dead.count(r)
                        },
                    },
                )
            )
        self.dispose()
        return list(self.outbox) if self.consumer is not None else summaries


class _ChannelState:
    """Unaligned checkpoints: the record batches a barrier overtook, per checkpoint."""

    def __init__(self) -> None:
        self.batches: dict[int, list[pa.RecordBatch]] = {}

    def add_input_data(self, checkpoint_id: int, channel: int, item: object) -> None:
        if isinstance(item, pa.RecordBatch) and item.num_rows:
            self.batches.setdefault(checkpoint_id, []).append(item)

    def finish_input(self, checkpoint_id: int) -> None:
        return None


class KeyedSubtask(SubtaskRunner):
    """Consumes its input channels through the checkpointed input gate (module docstring).

    Unaligned mode: the batches overtaken by barrier n are written as channel state
    (``checkpoints/chk-n/channel/<uid>/<subtask>.arrow``, referenced by the ack of the stage's
    first stateful step) and replayed, before any new input, by the next epoch's subtasks -- each
    takes the rows of its own key groups, so channel state survives rescaling too.
    """

    def run(self, messages: Iterable[tuple[int, Message]]) -> Iterator[Any]:
        with gc_paused():
            out = self._run(messages)
        yield from out

    def _run(self, messages: Iterable[tuple[int, Message]]) -> list[Any]:
        self.channel_state = _ChannelState()
        self._replay_channel_state()
        n_channels = topo.num_channels(self.stages, self.stage, self.job)
        per_channel: list[list[Message]] = [[] for _ in range(n_channels)]
        for _, message in messages:
            per_channel[message[0]].append(message)
        channels = []
        for items in per_channel:
            items.sort(key=lambda m: m[1])
            channels.append(ScriptedChannel(from_message(m) for m in items))
        handler = create_barrier_handler(
            self.job.mode, n_channels, self, channel_state_writer=self.channel_state
        )
        gate = CheckpointedInputGate(channels, handler)
        widths = [topo.width(self.stages[i], self.job) for i in self.stage.inputs]
        input_of = [i for i, w in enumerate(widths) for _ in range(w)]
        local = [c - sum(widths[: input_of[c]]) for c in range(n_channels)]
        combiner = InputWatermarkCombiner(len(widths))
        statuses = [StreamStatus.ACTIVE] * len(widths)
        valves = [
            StatusWatermarkValve(w, _ValveOut(self, combiner, statuses, i)) for i, w in enumerate(widths)
        ]
        for buffer in gate:
            item = buffer.item
            channel = buffer.channel
            if isinstance(item, pa.RecordBatch):
                self.push(item, input_of[channel])
            elif isinstance(item, (Watermark, StreamStatus)):
                valves[input_of[channel]].input(item, local[channel])
        summaries = self.acknowledge()
        self.dispose()
        return list(self.outbox) if self.consumer is not None else summaries

    def _anchor(self) -> str:
        return self.expected_uids()[0]

    def channel_state_handles(self) -> tuple[list[StateHandle], dict[str, Any]]:
        batches = self.channel_state.batches.get(self.plan.checkpoint_id, [])
        if not batches:
            return [], {}
        table = pa.Table.from_batches(batches).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue().to_pybytes()
        handle = self.responder.upload_channel_state(
            self.plan.checkpoint_id, self._anchor(), self.subtask, data
        )
        state = {"key": handle.key, "size": handle.size, "sha256": handle.sha256, "rows": table.num_rows}
        return [handle], {"channel_state": state}

    def _replay_channel_state(self) -> None:
        if self.metadata is None:
            return
        anchor = self._anchor()
        key = self.stage.key
        assert key is not None
        for task in self.metadata.tasks:
            entry = task.snapshot.get("channel_state") if task.task.uid == anchor else None
            if not entry:
                continue
            data = self.store.get(entry["key"]).data
            if sha256_hex(data) != entry["sha256"]:
                raise RuntimeError(
                    f"channel state {entry['key']} fails its SHA-256 check; "
                    "restore from an earlier checkpoint"
                )
            with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
                table = reader.read_all()
            for batch in table.to_batches():
                groups = key_groups(key_column(batch, key), self.job.max_parallelism)
                owned = (groups >= self.key_groups.first) & (groups <= self.key_groups.last)
                mine = batch.filter(pa.array(owned))
                if mine.num_rows:
                    self.push(mine)
