"""Run files: one immutable, sorted run of keyed value state on local disk (Arrow IPC file format).

A run holds the entries of some key groups, written once and never changed::

    one record batch per key group, in ascending key-group order (empty after a merge that
    dropped every entry of the key group)
    columns   key    <key type>     not null  ascending and distinct within the batch
              value  <value type>   nullable  null = tombstone (the key was deleted)
    schema metadata  epochal.format = "epochal-spill-run", epochal.format_version = "1",
                     epochal.key_groups = JSON list of the key groups, batch i <-> key_groups[i]
                     epochal.run = the logical run the file belongs to (optional)

Invariants: a key appears at most once per key group in a run; a run file's name ends in the first
32 hex digits of its BLAKE3 digest, and its full checksum is kept beside it by the store (the
snapshot lists it), so a damaged file is found before it is read. A reader reads one key group's
batch at a time (``pa.OSFile`` reads only that batch's bytes), so memory is bounded by the largest
key group of one run, never by the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from state_store.core import checksums
from state_store.core.errors import EpochalError
from state_store.core.keygroups import KeyGroupRange

FORMAT = "epochal-spill-run"
FORMAT_VERSION = 1
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


def write_run(
    directory: Path, seq: int, sch: pa.Schema, key_groups: list[int], batches: Iterable[pa.RecordBatch]
) -> RunFile:
    """Stream ``batches`` (one per key group of ``key_groups``, in order) into a new run file.

    Written to a temporary name, checksummed, then renamed to ``<seq>-<digest>.arrow``. Not
    fsynced: a local run file is a cache of state whose durable copy is the checkpoint's upload,
    and no local file is ever used without its size and checksum matching (``restore`` and
    ``damaged_file`` check both), so a file torn by a machine crash is fetched again, never read.
    """
    tmp = directory / f".{seq:08d}.tmp"
    count = 0
    with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, sch) as writer:
        for batch in batches:
            writer.write_batch(batch)
            count += 1
    if count != len(key_groups):
        raise ValueError(f"run {seq}: {count} batches for {len(key_groups)} key groups")
    checksum, size = file_checksum(tmp)
    name = f"{seq:08d}-{checksums.parse(checksum)[1][:32]}.arrow"
    tmp.rename(directory / name)
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
    """Reads one run file a key group at a time. The file stays open until :meth:`close`.

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
            groups = json.loads(meta[b"epochal.key_groups"])
            self.run_id = int(meta.get(b"epochal.run", seq))
        except (OSError, pa.ArrowInvalid, ValueError, KeyError) as exc:
            raise RunFileError(
                f"spill run {path} is unreadable ({exc}); delete the local state directory and restore"
                " from the checkpoint"
            ) from exc
        self.key_groups: dict[int, int] = {
            int(kg): i for i, kg in enumerate(groups) if only is None or int(kg) in only
        }
        self.size = path.stat().st_size

    def batch(self, key_group: int) -> pa.RecordBatch | None:
        """The (key, value) batch of ``key_group``, or None if this run has none."""
        i = self.key_groups.get(key_group)
        return None if i is None else self._reader.get_batch(i)

    def close(self) -> None:
        self._file.close()
