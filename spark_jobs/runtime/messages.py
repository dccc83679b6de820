"""What flows between stages: ordered messages per channel, carried through a Spark shuffle.

A message is ``(channel, seq, kind, payload)``; a subtask sorts what it receives by
``(channel, seq)`` and so rebuilds every input channel in its original order (Spark's shuffle
keeps no order across map tasks). Kinds:

| kind        | payload                                   | fan-out                      |
|-------------|-------------------------------------------|------------------------------|
| ``data``    | Arrow IPC stream bytes of one batch       | the subtask owning the keys  |
| ``wm``      | watermark timestamp (int ms)              | broadcast                    |
| ``status``  | ``"idle"`` / ``"active"``                 | broadcast                    |
| ``barrier`` | ``(checkpoint_id, timestamp, savepoint, unaligned)`` | broadcast         |
| ``cancel``  | checkpoint id                             | broadcast                    |
| ``end``     | None (end of partition)                   | broadcast                    |
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from state_store.core.stream import (
    END_OF_PARTITION,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    CheckpointType,
    EndOfPartition,
    StreamStatus,
    Watermark,
)

Message = tuple[int, int, str, Any]


def encode_batch(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_batch(data: bytes) -> pa.RecordBatch:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        batches = list(reader)
    if len(batches) != 1:
        raise ValueError(f"a data message must hold one record batch, found {len(batches)}")
    return batches[0]


def to_message(channel: int, seq: int, item: object) -> Message:
    """Encode a record batch or stream event as a message of ``channel``."""
    if isinstance(item, pa.RecordBatch):
        return (channel, seq, "data", encode_batch(item))
    if isinstance(item, Watermark):
        return (channel, seq, "wm", item.timestamp)
    if isinstance(item, StreamStatus):
        return (channel, seq, "status", item.name.lower())
    if isinstance(item, CheckpointBarrier):
        opts = item.options
        return (
            channel,
            seq,
            "barrier",
            (
                item.checkpoint_id,
                item.timestamp,
                opts.checkpoint_type is CheckpointType.SAVEPOINT,
                opts.unaligned,
            ),
        )
    if isinstance(item, CancelCheckpointMarker):
        return (channel, seq, "cancel", item.checkpoint_id)
    if isinstance(item, EndOfPartition):
        return (channel, seq, "end", None)
    raise TypeError(f"cannot send {type(item).__name__} between stages")


def from_message(message: Message) -> object:
    """Decode a message back into a record batch or stream event."""
    _, _, kind, payload = message
    if kind == "data":
        return decode_batch(payload)
    if kind == "wm":
        return Watermark(int(payload))
    if kind == "status":
        return StreamStatus.IDLE if payload == "idle" else StreamStatus.ACTIVE
    if kind == "barrier":
        checkpoint_id, timestamp, savepoint, unaligned = payload
        ctype = CheckpointType.SAVEPOINT if savepoint else CheckpointType.CHECKPOINT
        return CheckpointBarrier(checkpoint_id, timestamp, CheckpointOptions(ctype, unaligned))
    if kind == "cancel":
        return CancelCheckpointMarker(int(payload))
    if kind == "end":
        return END_OF_PARTITION
    raise ValueError(f"unknown message kind {kind!r}")
