"""Channel state of unaligned checkpoints: the record batches a barrier overtook, as one Arrow IPC
stream per (checkpoint, anchor uid, subtask).

    barrier handler -> ChannelStateRecorder.add_input_data(n, channel, item)   (unaligned mode only)
    acks of n       -> encode_channel_state(batches) -> upload -> ChannelStateRef in the anchor's ack
    next epoch      -> restored_channel_state(metadata, anchor) -> read_channel_state -> owned_rows

Invariants:
  * only record batches with rows are recorded (watermarks, statuses and barriers are not state);
  * the file is referenced by exactly one ack of the subtask, its *anchor*: the first expected uid
    (the stage's first stateful step, else its first sink); its snapshot entry ``channel_state``
    holds the key, size, checksum (``blake3:<hex>``; an entry written before format 2 has
    ``sha256``) and row count;
  * a file whose size or checksum differs from its entry is refused, never replayed;
  * on restore every subtask replays, before any new input, the rows of its own key groups from
    every file of the anchor -- so channel state survives rescaling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_jobs.runtime.keys import KeySpec, key_column, key_groups
from state_store.core import checksums
from state_store.core.keygroups import KeyGroupRange
from state_store.core.manifests import CompletedMetadata, StateHandle
from state_store.core.ports import ObjectStore
from state_store.core.task_parts import CHANNEL_STATE

SNAPSHOT_KEY = CHANNEL_STATE


class ChannelStateRecorder:
    """The barrier handler's ``ChannelStateWriter``: overtaken batches per checkpoint."""

    def __init__(self) -> None:
        self.batches: dict[int, list[pa.RecordBatch]] = {}

    def add_input_data(self, checkpoint_id: int, channel: int, item: object) -> None:
        if isinstance(item, pa.RecordBatch) and item.num_rows:
            self.batches.setdefault(checkpoint_id, []).append(item)

    def finish_input(self, checkpoint_id: int) -> None:
        return None


@dataclass(frozen=True, slots=True)
class EncodedChannelState:
    data: bytes
    rows: int


def encode_channel_state(batches: list[pa.RecordBatch]) -> EncodedChannelState:
    """One Arrow IPC stream of the batches (one table, chunks combined)."""
    table = pa.Table.from_batches(batches).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return EncodedChannelState(sink.getvalue().to_pybytes(), table.num_rows)


@dataclass(frozen=True, slots=True)
class ChannelStateRef:
    """The uploaded channel state of one subtask, as its anchor's ack references it."""

    handle: StateHandle
    rows: int

    def snapshot_entry(self) -> dict[str, Any]:
        return {SNAPSHOT_KEY: {**self.handle.to_json(), "rows": self.rows}}


def restored_channel_state(metadata: CompletedMetadata, anchor: str) -> Iterator[Mapping[str, Any]]:
    """The channel-state entries of the anchor's acks in the restored checkpoint."""
    for task in metadata.tasks:
        entry = task.parts.channel_state if task.task.uid == anchor else None
        if entry:
            yield entry


def read_channel_state(store: ObjectStore, entry: Mapping[str, Any]) -> pa.Table:
    """The table of one channel-state file, verified against its entry's size (when recorded) and
    checksum (BLAKE3, or the ``sha256`` of an entry written before format 2)."""
    checksum = entry["checksum"] if "checksum" in entry else f"{checksums.SHA256}:{entry['sha256']}"
    data = store.get(entry["key"]).data
    size = entry.get("size", len(data))
    actual = checksums.mismatch(checksum, data)
    if actual is not None or size != len(data):
        raise RuntimeError(
            f"channel state {entry['key']} has {len(data)} bytes and checksum {actual or checksum}, its "
            f"checkpoint says {size} bytes and {checksum}; restore from an earlier checkpoint"
        )
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()


def owned_rows(
    table: pa.Table, key: KeySpec, owned: KeyGroupRange, max_parallelism: int
) -> Iterator[pa.RecordBatch]:
    """The non-empty parts of the table's batches whose keys fall in the ``owned`` key groups."""
    for batch in table.to_batches():
        groups = key_groups(key_column(batch, key), max_parallelism)
        mine = batch.filter(pa.array((groups >= owned.first) & (groups <= owned.last)))
        if mine.num_rows:
            yield mine
