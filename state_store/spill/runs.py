"""Run files: one immutable, sorted run of keyed value state on local disk (Arrow IPC file format).

A run holds the entries of some key groups, written once and never changed (format version 2)::

    record batches ("blocks") of at most the store's block size, in ascending (key group, key)
    order: one or more per key group that has entries, none for a key group without
    then one last record batch: the block index
    columns   key    <key type>     not null  ascending and distinct within a key group
              value  <value type>   nullable  null = tombstone (the key was deleted)
    block index  key = the last (largest) key of each block, value = null; its custom metadata
                 epochal.block_key_groups = JSON list of the key group of each block
    schema metadata  epochal.format = "epochal-spill-run", epochal.format_version = "2",
                     epochal.key_groups = JSON list of the key groups of the logical run (a
                         file of it may hold blocks of some of them only)
                     epochal.run = the logical run the file belongs to (optional)

Version 1 files (still read; a savepoint may hold them) have exactly one batch per listed key group
(empty after a merge that dropped every entry) and no block index.

Invariants: a key appears at most once per key group in a run; a run file's name ends in the first
32 hex digits of its BLAKE3 digest, and its full checksum is kept beside it by the store (the
snapshot lists it), so a damaged file is found before it is read. A reader reads one block at a time
(``pa.OSFile`` reads only that batch's bytes) and finds the blocks that may hold a key from the
index, so memory is bounded by the block size, never by a key group or the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from state_store.core import checksums
from state_store.core.errors import EpochalError
from state_store.core.keygroups import KeyGroupRange

FORMAT = "epochal-spill-run"
FORMAT_VERSION = 2
INDEX_KEY_GROUPS = b"epochal.block_key_groups"
INDEX_BYTES_PER_BLOCK = 512
"""A bound on what one block adds to a file besides its data: IPC message header, padding, its entry
in the footer and in the block index (measured: about 250 bytes for an 8-byte key)."""
_CHUNK = 1 << 20


class RunFileError(EpochalError):
    """A run file that is not a readable run of this format (the message names the file and the remedy)."""


@dataclass(frozen=True, slots=True)
class RunFile:
    """A run file as a snapshot lists it: name (unique, content-derived), size in bytes, checksum."""

    name: str
    size: int
    checksum: str


def schema(
    key_type: pa.DataType, value_type: pa.DataType, key_groups: list[int], run_id: int | None = None
) -> pa.Schema:
    """The schema of a run file. ``run_id``: the files of one logical run (one flush or merge split
    into several files of contiguous key groups) share it; a file without it is a run of its own."""
    meta = {
        "epochal.format": FORMAT,
        "epochal.format_version": str(FORMAT_VERSION),
        "epochal.key_groups": json.dumps(key_groups),
    }
    if run_id is not None:
        meta["epochal.run"] = str(run_id)
    return pa.schema(
        [pa.field("key", key_type, nullable=False), pa.field("value", value_type, nullable=True)],
        metadata=meta,
    )


class RunWriter:
    """Streams the blocks of one run file: :meth:`write` each (key group, batch) in ascending key
    group and key order (empty batches are skipped), then :meth:`close` writes the block index.

    The file is written to a temporary name, checksummed, then renamed to ``<seq>-<digest>.arrow``.
    Not fsynced: a local run file is a cache of state whose durable copy is the checkpoint's upload,
    and no local file is ever used without its size and checksum matching (``restore`` and
    ``damaged_file`` check both), so a file torn by a machine crash is fetched again, never read.
    """

    def __init__(self, directory: Path, seq: int, sch: pa.Schema) -> None:
        self.directory = directory
        self.seq = seq

        self._plain = sch.remove_metadata()
        self._tmp = directory / f".{seq:08d}.tmp"
        self._sink = pa.OSFile(str(self._tmp), "wb")
        self._writer = ipc.new_file(self._sink, sch)
        self._groups: list[int] = []
        self._last_keys: list[object] = []

    def write(self, key_group: int, batch: pa.RecordBatch) -> None:
        if self._groups and key_group < self._groups[-1]:
            raise ValueError(
                f"run {self.seq}: a block of key group {key_group} after key group {self._groups[-1]}"
            )
        if not batch.num_rows:
            return
        self._writer.write_batch(batch)
        self._groups.append(key_group)
        self._last_keys.append(batch.column(0)[batch.num_rows - 1].as_py())

    def size_with(self, batch: pa.RecordBatch) -> int:
        """About the file's size if ``batch`` were its next block and the file were then closed (an
        upper bound for the block index and footer: ``INDEX_BYTES_PER_BLOCK`` per block)."""
        written: int = self._sink.tell()
        return written + int(batch.nbytes) + (len(self._groups) + 2) * INDEX_BYTES_PER_BLOCK

    def close(self) -> RunFile:
        n = len(self._groups)
        index = pa.record_batch(
            [
                pa.array(self._last_keys, self._plain.field("key").type),
                pa.nulls(n, self._plain.field("value").type),
            ],
            schema=self._plain,
        )
        self._writer.write_batch(index, custom_metadata={INDEX_KEY_GROUPS: json.dumps(self._groups).encode()})
        self._writer.close()
        self._sink.close()
        checksum, size = file_checksum(self._tmp)
        name = f"{self.seq:08d}-{checksums.parse(checksum)[1][:32]}.arrow"
        self._tmp.rename(self.directory / name)
        return RunFile(name, size, checksum)


def file_checksum(path: Path) -> tuple[str, int]:
    """(``"blake3:<hex>"``, size) of the file, read in 1 MiB chunks."""
    h = checksums.new_hash(checksums.STATE_FILE_ALGORITHM)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return f"{checksums.STATE_FILE_ALGORITHM}:{h.hexdigest()}", size


class RunReader:
    """Reads one run file a block at a time. The file stays open until :meth:`close`.

    ``only``: the key groups this run is authoritative for (the range of the snapshot it came from,
    met with the reader's range). Others are invisible: after a rescale, a file adopted by two
    subtasks holds key groups that the other subtask may have changed since.
    """

    def __init__(self, path: Path, seq: int, only: KeyGroupRange | None = None) -> None:
        self.path = path
        self.seq = seq
        self.only = only
        try:
            self._file = pa.OSFile(str(path))
            self._reader = ipc.open_file(self._file)
            meta = self._reader.schema.metadata or {}
            if meta.get(b"epochal.format") != FORMAT.encode():
                raise ValueError("not an epochal-spill-run file")
            version = int(meta[b"epochal.format_version"])
            if version > FORMAT_VERSION:
                raise ValueError(
                    f"format_version {version} is newer than this Epochal reads ({FORMAT_VERSION})"
                )
            self.run_id = int(meta.get(b"epochal.run", seq))
            if version == 1:
                groups = [int(kg) for kg in json.loads(meta[b"epochal.key_groups"])]
                last_keys = None
            else:
                n = self._reader.num_record_batches - 1
                index, index_meta = self._reader.get_batch_with_custom_metadata(n)
                groups = [int(kg) for kg in json.loads(index_meta[INDEX_KEY_GROUPS])]
                if len(groups) != n or index.num_rows != n:
                    raise ValueError(f"its block index lists {len(groups)} blocks of {n}")
                last_keys = index.column(0)
        except (OSError, pa.ArrowInvalid, ValueError, KeyError, TypeError) as exc:
            raise RunFileError(
                f"spill run {path} is unreadable ({exc}); delete the local state directory and restore"
                " from the checkpoint"
            ) from exc
        self.key_groups: dict[int, list[int]] = {}
        """The blocks (batch numbers, in key order) of each key group this reader sees."""
        for i, kg in enumerate(groups):
            if only is None or kg in only:
                self.key_groups.setdefault(kg, []).append(i)
        self._last_keys: dict[int, pa.Array] = {}
        if last_keys is not None:
            for kg, blocks in self.key_groups.items():
                self._last_keys[kg] = last_keys.slice(blocks[0], len(blocks))
        self.size = path.stat().st_size

    def blocks(self, key_group: int) -> list[int]:
        """The blocks of ``key_group`` in key order (empty if this run has none)."""
        return self.key_groups.get(key_group, [])

    def last_keys(self, key_group: int) -> pa.Array | None:
        """The largest key of each block of ``key_group``; None in a version-1 file (one block)."""
        return self._last_keys.get(key_group)

    def block(self, i: int) -> pa.RecordBatch:
        """Block ``i`` (a (key, value) batch), read from disk now."""
        return self._reader.get_batch(i)

    def close(self) -> None:
        self._file.close()
