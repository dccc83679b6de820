"""Stream runtime core of a subtask: input gate, barrier handlers, watermarks, timers.

Pure (standard library only, no I/O, no clock reads). One subtask wires it like this::

    channels (record chunks + events) ──> CheckpointedInputGate ──> operator
                                               │  barriers, markers, end-of-partition
                                               v
                                  barrier handler (by mode) ──trigger / abort──> CheckpointBarrierListener
    Watermark / StreamStatus items ──> StatusWatermarkValve ──> operator watermark ──> TimerService

Semantics follow Flink 1.11: see each module's docstring for the protocol step it implements.
"""

from state_store.core.stream.aligner import CheckpointBarrierAligner
from state_store.core.stream.alternating import AlternatingCheckpointBarrierHandler
from state_store.core.stream.events import (
    DEFAULT_CHECKPOINT_OPTIONS,
    END_OF_PARTITION,
    MAX_TIMESTAMP,
    MAX_WATERMARK,
    MIN_TIMESTAMP,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    CheckpointType,
    ControlEvent,
    EndOfPartition,
    StreamStatus,
    TimeEvent,
    Watermark,
    is_event,
)
from state_store.core.stream.handler import (
    BarrierAbortReason,
    ChannelStateWriter,
    CheckpointBarrierHandler,
    CheckpointBarrierListener,
    CheckpointMetrics,
    StreamCorruptError,
)
from state_store.core.stream.input_gate import (
    BufferOrEvent,
    Channel,
    CheckpointedInputGate,
    IteratorChannel,
    ScriptedChannel,
)
from state_store.core.stream.modes import CheckpointingMode, create_barrier_handler, parse_checkpointing_mode
from state_store.core.stream.strategies import (
    BoundedOutOfOrdernessWatermarks,
    MonotonousTimestampsWatermarks,
    StreamWatermarkOutput,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarksWithIdleness,
)
from state_store.core.stream.timers import (
    InternalTimer,
    TimeDomain,
    TimerRestoreError,
    TimerService,
    Triggerable,
)
from state_store.core.stream.tracker import MAX_CHECKPOINTS_TO_TRACK, CheckpointBarrierTracker
from state_store.core.stream.unaligner import CheckpointBarrierUnaligner
from state_store.core.stream.watermarks import (
    InputChannelStatus,
    InputWatermarkCombiner,
    StatusWatermarkValve,
    ValveOutput,
)

__all__ = [
    "DEFAULT_CHECKPOINT_OPTIONS",
    "END_OF_PARTITION",
    "MAX_CHECKPOINTS_TO_TRACK",
    "MAX_TIMESTAMP",
    "MAX_WATERMARK",
    "MIN_TIMESTAMP",
    "AlternatingCheckpointBarrierHandler",
    "BarrierAbortReason",
    "BoundedOutOfOrdernessWatermarks",
    "BufferOrEvent",
    "CancelCheckpointMarker",
    "Channel",
    "ChannelStateWriter",
    "CheckpointBarrier",
    "CheckpointBarrierAligner",
    "CheckpointBarrierHandler",
    "CheckpointBarrierListener",
    "CheckpointBarrierTracker",
    "CheckpointBarrierUnaligner",
    "CheckpointMetrics",
    "CheckpointOptions",
    "CheckpointType",
    "CheckpointedInputGate",
    "CheckpointingMode",
    "ControlEvent",
    "EndOfPartition",
    "InputChannelStatus",
    "InputWatermarkCombiner",
    "InternalTimer",
    "IteratorChannel",
    "MonotonousTimestampsWatermarks",
    "ScriptedChannel",
    "StatusWatermarkValve",
    "StreamCorruptError",
    "StreamStatus",
    "StreamWatermarkOutput",
    "TimeDomain",
    "TimeEvent",
    "TimerRestoreError",
    "TimerService",
    "Triggerable",
    "ValveOutput",
    "Watermark",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarksWithIdleness",
    "create_barrier_handler",
    "is_event",
    "parse_checkpointing_mode",
]
