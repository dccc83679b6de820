"""Restore a spill store from snapshots: adopt verified local files, fetch the rest, refuse damage.

Steps, for a subtask that will own ``key_group_range``:

1. Keep the sources whose key-group range meets the new range (a rescale reads only what it
   needs); their ranges must be disjoint (they are the old subtasks' ranges) and their column types
   equal.
2. For each of their run files: a local file of that name whose size and checksum match is adopted
   as is (local recovery: a process or local directory that survived); a local file that does not
   match is damaged and is fetched again; a missing file is fetched through ``fetch``.
3. Every fetched file is verified before it is used; a mismatch raises
   :class:`~state_store.spill.snapshots.DamagedRunFileError` naming the file and the remedy.
4. Local files no source lists are deleted (stale state of an older attempt).
5. The runs are opened in source order, oldest first, each reading only the key groups of its
   source's range met with the new range: key groups outside stay in the adopted files but are
   never read (another subtask may own and change them) and are dropped by the next compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.spill.runs import RunFile, RunReader, file_checksum
from state_store.spill.snapshots import DamagedRunFileError, SpillSnapshot
from state_store.spill.store import SpillStore

Fetch = Callable[[RunFile, Path], None]
"""Writes the bytes of a run file (as its snapshot lists it) at the given local path."""


@dataclass(frozen=True, slots=True)
class RestoreStats:
    """What a restore did: files adopted from local disk, fetched, and fetched again because damaged."""

    adopted: tuple[str, ...]
    fetched: tuple[str, ...]
    damaged: tuple[str, ...]


def restore(
    directory: Path,
    sources: Sequence[tuple[SpillSnapshot, Fetch]],
    key_group_range: KeyGroupRange,
    *,
    memory_budget_bytes: int,
    max_runs: int = 4,
    block_bytes: int | None = None,
) -> tuple[SpillStore, RestoreStats]:
    """A store over ``directory`` holding the state of ``sources`` for ``key_group_range``."""
    used = [(s, f) for s, f in sources if len(s.key_group_range.intersect(key_group_range))]
    _check_sources([s for s, _ in used])
    directory.mkdir(parents=True, exist_ok=True)
    adopted: list[str] = []
    fetched: list[str] = []
    damaged: list[str] = []
    runs: list[tuple[RunReader, RunFile]] = []
    listed: set[str] = set()
    for snap, fetch in used:
        for run in snap.runs:
            only = run.key_groups.intersect(snap.key_group_range).intersect(key_group_range)
            if not len(only):
                continue  # fetch only what this subtask reads
            file = run.file
            path = directory / file.name
            if file.name in listed:  # also listed by an earlier source (a file both halves adopted)
                pass
            elif path.exists():
                if _matches(path, file):
                    adopted.append(file.name)
                else:
                    damaged.append(file.name)
                    _fetch_verified(fetch, file, path)
                    fetched.append(file.name)
            else:
                _fetch_verified(fetch, file, path)
                fetched.append(file.name)
            listed.add(file.name)
            runs.append((RunReader(path, int(file.name.split("-", 1)[0]), only), file))
    for stale in directory.iterdir():
        if stale.name not in listed:
            stale.unlink()
    key_type, value_type = (used[0][0].key_type, used[0][0].value_type) if used else (None, None)
    store = SpillStore(
        directory,
        key_group_range,
        memory_budget_bytes=memory_budget_bytes,
        max_runs=max_runs,
        block_bytes=block_bytes,
        _runs=runs,
        **({"key_type": key_type, "value_type": value_type} if key_type is not None else {}),
    )
    return store, RestoreStats(tuple(adopted), tuple(fetched), tuple(damaged))


def _check_sources(snaps: Sequence[SpillSnapshot]) -> None:
    for i, a in enumerate(snaps):
        for b in snaps[i + 1 :]:
            if len(a.key_group_range.intersect(b.key_group_range)):
                ra, rb = a.key_group_range, b.key_group_range
                raise BadInputError(
                    f"spill restore: snapshots of key groups {ra.first}..{ra.last}"
                    f" and {rb.first}..{rb.last} overlap:"
                    " pass one snapshot per old subtask"
                )
            if not (a.key_type.equals(b.key_type) and a.value_type.equals(b.value_type)):
                raise BadInputError(
                    f"spill restore: snapshots hold different column types ({a.key_type}/{a.value_type} vs "
                    f"{b.key_type}/{b.value_type}): restore snapshots of one operator's state only"
                )


def _matches(path: Path, file: RunFile) -> bool:
    return path.stat().st_size == file.size and file_checksum(path)[0] == file.checksum


def _fetch_verified(fetch: Fetch, file: RunFile, path: Path) -> None:
    tmp = path.with_name(f".{file.name}.fetch")
    fetch(file, tmp)
    checksum, size = file_checksum(tmp)
    if checksum != file.checksum or size != file.size:
        tmp.unlink()
        raise DamagedRunFileError(
            f"spill run file {file.name} is damaged: {size} bytes with {checksum}, the snapshot says"
            f" {file.size} bytes with {file.checksum}; restore from an earlier checkpoint or a savepoint",
            file.name,
            f"{size} bytes and checksum {checksum}",
        )
    tmp.replace(path)
