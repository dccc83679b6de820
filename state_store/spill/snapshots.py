"""What a spill store's snapshot is: the list of its immutable run files, and the diff to a base.

A snapshot of a :class:`~state_store.spill.store.SpillStore` is the ordered tuple of its run files
(oldest first; for one key group a later run's entry wins) plus the key-group range and column
types. Run files never change after they are written, and a name is never reused for other bytes
(it ends in the content digest), so "the files changed since the base checkpoint" is simply the
files whose names the base does not list (:meth:`SpillSnapshot.changed_since`): an incremental
checkpoint ships those and references the rest (shared files, reference-counted by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from state_store.core.errors import EpochalError
from state_store.core.keygroups import KeyGroupRange
from state_store.spill.runs import RunFile


class DamagedRunFileError(EpochalError):
    """A run file whose bytes do not match the checksum its snapshot lists; ``name`` is the run
    file's name and ``found`` what its bytes were (size and checksum), when a fetch was verified."""

    def __init__(self, message: str, name: str | None = None, found: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.found = found


@dataclass(frozen=True, slots=True)
class SnapshotRun:
    """One run of a snapshot: its file, and the key groups it is authoritative for (a file adopted
    by several subtasks after a rescale appears once per subtask, each with its own range)."""

    file: RunFile
    key_groups: KeyGroupRange


@dataclass(frozen=True, slots=True)
class SpillSnapshot:
    """The runs of one store at one checkpoint (oldest first) and what they hold."""

    key_group_range: KeyGroupRange
    key_type: pa.DataType
    value_type: pa.DataType
    runs: tuple[SnapshotRun, ...]

    @property
    def files(self) -> tuple[RunFile, ...]:
        """The distinct files of the runs, in run order."""
        return tuple({r.file.name: r.file for r in self.runs}.values())

    @property
    def size(self) -> int:
        """Bytes of all files (the full state on disk)."""
        return sum(f.size for f in self.files)

    def changed_since(self, base: SpillSnapshot | None) -> tuple[RunFile, ...]:
        """The files of this snapshot that ``base`` does not list (all of them without a base)."""
        known = set() if base is None else {f.name for f in base.files}
        return tuple(f for f in self.files if f.name not in known)
