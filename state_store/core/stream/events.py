"""In-band stream elements: what a channel carries besides record chunks.

A channel of a subtask is one ordered sequence of items::

    chunk chunk Watermark(17) chunk CheckpointBarrier(4) chunk IDLE ... ACTIVE chunk EndOfPartition
    \\_________ epoch 4 _____________/                  \\______________ epoch 5 _______________...

* **Record chunks** are opaque payloads (Arrow record batches in the Spark runtime, any object in
  tests). The core never looks inside one and never imports pyarrow; anything that is not one of the
  event types below is a chunk.
* **Control events** are consumed by the barrier handler inside the input gate:
  :class:`CheckpointBarrier`, :class:`CancelCheckpointMarker`, :class:`EndOfPartition`.
* **Time events** travel with the data and are fed to the watermark valve by the subtask:
  :class:`Watermark` and :class:`StreamStatus`.

Invariant: barrier *n* on a channel separates the items of epoch *n* (before it) from those of
epoch *n + 1* (after it). A channel carries barriers (or cancellation markers) in increasing id order.
Timestamps are milliseconds since the Unix epoch held in Python ints, bounded like Java longs so that
values read from Flink-style snapshots keep their meaning (:data:`MIN_TIMESTAMP`, :data:`MAX_TIMESTAMP`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

MIN_TIMESTAMP: Final[int] = -(2**63)
"""Smallest timestamp (Java ``Long.MIN_VALUE``): the watermark of a channel that has seen nothing."""

MAX_TIMESTAMP: Final[int] = 2**63 - 1
"""Largest timestamp (Java ``Long.MAX_VALUE``): the watermark that means end of event time."""


class CheckpointType(enum.Enum):
    """What a barrier asks for: a periodic checkpoint or a user-owned savepoint."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"

    @property
    def is_savepoint(self) -> bool:
        return self is CheckpointType.SAVEPOINT


@dataclass(frozen=True, slots=True)
class CheckpointOptions:
    """Options carried by a barrier.

    ``unaligned`` says whether the coordinator allows the subtask to snapshot at the first barrier
    (in-flight records become channel state). Savepoints are always taken aligned: the
    :class:`~state_store.core.stream.alternating.AlternatingCheckpointBarrierHandler` routes them to
    the aligner whatever this flag says.
    """

    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT
    unaligned: bool = False

    @property
    def is_savepoint(self) -> bool:
        return self.checkpoint_type is CheckpointType.SAVEPOINT


DEFAULT_CHECKPOINT_OPTIONS: Final[CheckpointOptions] = CheckpointOptions()


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    """The cut of checkpoint ``checkpoint_id`` in one channel.

    ``timestamp`` is the trigger time (ms since the epoch) set by the coordinator; the handlers use it
    only for the checkpoint-start-delay metric.
    """

    checkpoint_id: int
    timestamp: int = 0
    options: CheckpointOptions = field(default=DEFAULT_CHECKPOINT_OPTIONS)

    @property
    def is_checkpoint(self) -> bool:
        """True for a periodic checkpoint, False for a savepoint (Flink's ``isCheckpoint``)."""
        return not self.options.is_savepoint


@dataclass(frozen=True, slots=True)
class CancelCheckpointMarker:
    """Sent instead of barrier ``checkpoint_id`` by an upstream that declined that checkpoint."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """The channel is finished: nothing follows on it. Use the singleton :data:`END_OF_PARTITION`."""


END_OF_PARTITION: Final[EndOfPartition] = EndOfPartition()


@dataclass(frozen=True, slots=True)
class Watermark:
    """No record with an event time ``<= timestamp`` is expected after this point in the channel."""

    timestamp: int


MAX_WATERMARK: Final[Watermark] = Watermark(MAX_TIMESTAMP)
"""Sent by a source that is permanently finished (not :attr:`StreamStatus.IDLE`, which is temporary)."""


class StreamStatus(enum.Enum):
    """Temporary status of a channel.

    A source guarantees that it emits no record between IDLE and the next ACTIVE, so records need no
    status check; only watermarks of idle channels are held back (see the watermark valve).
    """

    IDLE = "idle"
    ACTIVE = "active"

    @property
    def is_idle(self) -> bool:
        return self is StreamStatus.IDLE

    @property
    def is_active(self) -> bool:
        return self is StreamStatus.ACTIVE


ControlEvent = CheckpointBarrier | CancelCheckpointMarker | EndOfPartition
"""Events the input gate routes to the barrier handler."""

TimeEvent = Watermark | StreamStatus
"""Events the subtask feeds to the watermark valve."""

CONTROL_EVENT_TYPES: Final[tuple[type, ...]] = (CheckpointBarrier, CancelCheckpointMarker, EndOfPartition)
EVENT_TYPES: Final[tuple[type, ...]] = (*CONTROL_EVENT_TYPES, Watermark, StreamStatus)


def is_event(item: object) -> bool:
    """True if ``item`` is an in-band event; anything else on a channel is a record chunk."""
    return type(item) in EVENT_TYPES
