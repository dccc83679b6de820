"""Recording fakes for the stream core tests: a listener, a valve output, a timer target, a clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from state_store.core.stream import (
    BarrierAbortReason,
    BufferOrEvent,
    CheckpointBarrier,
    CheckpointedInputGate,
    CheckpointMetrics,
    CheckpointOptions,
    CheckpointType,
    InternalTimer,
    StreamStatus,
    Watermark,
)

SAVEPOINT = CheckpointOptions(CheckpointType.SAVEPOINT)
CHECKPOINT = CheckpointOptions(CheckpointType.CHECKPOINT)


def barrier(checkpoint_id: int, timestamp: int = 0, savepoint: bool = False) -> CheckpointBarrier:
    return CheckpointBarrier(checkpoint_id, timestamp, SAVEPOINT if savepoint else CHECKPOINT)


@dataclass(frozen=True)
class Triggered:
    checkpoint_id: int
    metrics: CheckpointMetrics


@dataclass(frozen=True)
class Aborted:
    checkpoint_id: int
    reason: BarrierAbortReason


@dataclass
class RecordingListener:
    """Records every trigger/abort in order; ``on_notify`` lets a test observe the gate at that moment."""

    events: list[Triggered | Aborted] = field(default_factory=list)

    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: CheckpointOptions, metrics: CheckpointMetrics
    ) -> None:
        self.events.append(Triggered(checkpoint_id, metrics))

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        self.events.append(Aborted(checkpoint_id, reason))

    @property
    def triggered(self) -> list[int]:
        return [e.checkpoint_id for e in self.events if isinstance(e, Triggered)]

    @property
    def aborted(self) -> list[tuple[int, BarrierAbortReason]]:
        return [(e.checkpoint_id, e.reason) for e in self.events if isinstance(e, Aborted)]


@dataclass
class RecordingChannelState:
    """A ChannelStateWriter that keeps what it was given."""

    data: dict[int, list[tuple[int, object]]] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)

    def add_input_data(self, checkpoint_id: int, channel: int, item: object) -> None:
        self.data.setdefault(checkpoint_id, []).append((channel, item))

    def finish_input(self, checkpoint_id: int) -> None:
        self.finished.append(checkpoint_id)


@dataclass
class RecordingValveOutput:
    emitted: list[Watermark | StreamStatus] = field(default_factory=list)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.emitted.append(watermark)

    def emit_stream_status(self, status: StreamStatus) -> None:
        self.emitted.append(status)

    @property
    def watermarks(self) -> list[int]:
        return [e.timestamp for e in self.emitted if isinstance(e, Watermark)]


@dataclass
class RecordingTarget:
    """Timer target; ``on_fire`` may register more timers while firing."""

    fired: list[tuple[str, int, object, object]] = field(default_factory=list)

    def on_event_time(self, timer: InternalTimer[object, object]) -> None:
        self.fired.append(("event", timer.timestamp, timer.key, timer.namespace))

    def on_processing_time(self, timer: InternalTimer[object, object]) -> None:
        self.fired.append(("processing", timer.timestamp, timer.key, timer.namespace))


class StepClock:
    """A manual nanosecond/millisecond clock: returns ``now`` and is advanced by the test."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def drain(gate: CheckpointedInputGate, limit: int = 100_000) -> list[BufferOrEvent]:
    """Poll until nothing is available; return everything handed out."""
    out: list[BufferOrEvent] = []
    for _ in range(limit):
        polled = gate.poll_next()
        if polled is None:
            return out
        out.append(polled)
    raise AssertionError("gate did not run dry")


def items(polled: Iterable[BufferOrEvent]) -> list[object]:
    return [p.item for p in polled]
