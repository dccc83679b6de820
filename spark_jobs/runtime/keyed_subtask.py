"""A keyed stage subtask: owns a key-group range and consumes its input channels.

::

    replay the restored channel state of its key groups (unaligned checkpoints) before any input
    rebuild every input channel from the shuffle (sorted by (channel, seq)); a channel simply runs
    dry at the end of the epoch -- no end-of-partition is sent, because the stream continues in the
    next epoch (an end-of-partition would make the at-least-once tracker abort, as Flink 1.11 does
    for a finished input)
    CheckpointedInputGate(handler by mode) -> StatusWatermarkValve per input -> operator chain
    barrier n (aligned: all channels) -> take_snapshot -> end of input -> acks

Invariants: a channel's items are processed in sequence order; the chain's watermark is the min
of its inputs' (each input's valve excludes idle channels) and the stage is IDLE only when every
input is; in unaligned mode the batches overtaken by barrier n are written as channel state
(``checkpoints/chk-n/channel/<uid>/<subtask>.arrow``, see ``channel_state``) and referenced by
the anchor's ack.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.chain import OperatorChain, StageExit
from spark_jobs.runtime.channel_state import (
    ChannelStateRecorder,
    ChannelStateRef,
    encode_channel_state,
    owned_rows,
    read_channel_state,
    restored_channel_state,
)
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.messages import Message, from_message
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.subtask import SubtaskParts, SubtaskRunner, open_subtask
from state_store.core.stream import (
    CheckpointedInputGate,
    InputWatermarkCombiner,
    ScriptedChannel,
    StatusWatermarkValve,
    StreamStatus,
    Watermark,
    create_barrier_handler,
)


def open_keyed_subtask(plan: EpochPlan, stage_index: int, subtask: int) -> KeyedSubtask:
    return KeyedSubtask(open_subtask(plan, stage_index, subtask))


class _ValveOut:
    """Output of input i's valve: into the N-input combiner (combined watermark = min of inputs,
    emitted when it advances) and the combined status (IDLE only when every input is idle)."""

    def __init__(
        self,
        chain: OperatorChain,
        exit: StageExit,
        combiner: InputWatermarkCombiner,
        statuses: list[StreamStatus],
        index: int,
    ) -> None:
        self.chain, self.exit = chain, exit
        self.combiner, self.statuses, self.index = combiner, statuses, index

    def emit_watermark(self, watermark: Watermark) -> None:
        combined = self.combiner.report_watermark(watermark, self.index)
        if combined is not None:
            self.chain.watermark(combined.timestamp)

    def emit_stream_status(self, status: StreamStatus) -> None:
        before = all(s is StreamStatus.IDLE for s in self.statuses)
        self.statuses[self.index] = status
        after = all(s is StreamStatus.IDLE for s in self.statuses)
        if before != after:
            self.exit.broadcast(StreamStatus.IDLE if after else StreamStatus.ACTIVE)


class KeyedSubtask(SubtaskRunner):
    """Consumes its input channels through the checkpointed input gate (module docstring)."""

    def __init__(self, parts: SubtaskParts) -> None:
        super().__init__(parts)
        self.recorder = ChannelStateRecorder()

    def run(self, messages: Iterable[tuple[int, Message]]) -> Iterator[Any]:
        with gc_paused():
            try:
                out = self._run(messages)
            except BaseException:
                self.abandon()
                raise
        yield from out

    def _run(self, messages: Iterable[tuple[int, Message]]) -> list[Any]:
        self._replay_channel_state()
        n_channels = topo.num_channels(self.stages, self.stage, self.job)
        per_channel: list[list[Message]] = [[] for _ in range(n_channels)]
        for _, message in messages:
            per_channel[message[0]].append(message)
        channels = []
        for items in per_channel:
            items.sort(key=lambda m: m[1])
            channels.append(ScriptedChannel(from_message(m) for m in items))
        handler = create_barrier_handler(self.job.mode, n_channels, self, channel_state_writer=self.recorder)
        gate = CheckpointedInputGate(channels, handler)
        widths = [topo.width(self.stages[i], self.job) for i in self.stage.inputs]
        input_of = [i for i, w in enumerate(widths) for _ in range(w)]
        local = [c - sum(widths[: input_of[c]]) for c in range(n_channels)]
        combiner = InputWatermarkCombiner(len(widths))
        statuses = [StreamStatus.ACTIVE] * len(widths)
        valves = [
            StatusWatermarkValve(w, _ValveOut(self.chain, self.exit, combiner, statuses, i))
            for i, w in enumerate(widths)
        ]
        for buffer in gate:
            item = buffer.item
            channel = buffer.channel
            if isinstance(item, pa.RecordBatch):
                self.chain.push(item, input_of[channel])
            elif isinstance(item, (Watermark, StreamStatus)):
                valves[input_of[channel]].input(item, local[channel])
        summaries = self.acknowledge()
        self.dispose()
        return self.result(summaries)

    def channel_state(self) -> ChannelStateRef | None:
        batches = self.recorder.batches.get(self.plan.checkpoint_id, [])
        if not batches:
            return None
        anchor = self.anchor()
        if anchor is None:
            raise RuntimeError(
                f"stage {self.stage.index} of job {self.job.job_id} has in-flight records at an "
                "unaligned barrier but no stateful step or sink whose ack could keep them: add one to "
                "the stage or use mode='exactly_once'"
            )
        encoded = encode_channel_state(batches)
        n = self.plan.checkpoint_id
        handle = self.responder.upload_channel_state(n, anchor, self.subtask, encoded.data)
        return ChannelStateRef(handle, encoded.rows)

    def _replay_channel_state(self) -> None:
        anchor = self.anchor()
        if self.metadata is None or anchor is None:
            return  # a stage without an anchor never writes channel state
        key = self.stage.key
        assert key is not None
        for entry in restored_channel_state(self.metadata, anchor):
            table = read_channel_state(self.store, entry)
            for batch in owned_rows(table, key, self.key_groups, self.job.max_parallelism):
                self.chain.push(batch)
