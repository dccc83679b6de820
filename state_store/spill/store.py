"""One subtask's keyed value state on local disk under a memory budget: a write buffer and sorted runs.

Writes go to an in-memory write buffer (Arrow batches of key group, key, value; a delete is a null
value, a tombstone). When the buffer reaches ``budget / BUFFER_FRACTION`` it is sorted by (key
group, key), deduplicated (the last write of a key wins) and written as a new run (``runs``): one
logical run, split into files of about the budget each (``FILE_FRACTION``), cut between blocks.
A run file keeps a key group in blocks of at most ``budget / BLOCK_FRACTION`` bytes with an index of
each block's last key. Reads look at the buffer, then at the runs newest first, one key group at a
time, read only the blocks that may hold a wanted key, one at a time, and stop at the first run that
leaves no key unfound; a block's sorted keys are searched (binary search for integer keys, a hash of
the wanted keys otherwise), never hashed whole. Too many logical runs trigger a size-tiered
compaction that merges the newest runs of similar size: a streaming merge that holds one block of
each merging run.

    put/delete --> write buffer --(budget/16 reached, or snapshot)--> run (immutable files)
                                                                       |
              logical runs > max_runs: merge the newest similar-sized --+--> one run, old files
              runs (all of them when that reaches the oldest)                deleted after the
                                                                             next snapshot

Invariants:

* Memory: the store holds at most the write buffer (budget/16; a larger put is buffered in copied
  pieces of that size), its sorted copy while flushing or reading, ONE block while reading, and
  one block of every merging run plus their merged part while merging (``peak_memory_bytes``
  accounts for these). None of it grows with the size of a key group or of the state: a key group
  larger than the budget is read and merged block by block.
* Newest wins: for every (key group, key) the value is the one of the latest put/delete; the list
  of runs is ordered oldest first and a later run (or the buffer) shadows an earlier one.
* Only key groups of the store's range are read, written or listed; a run adopted from a subtask
  of another parallelism may hold other key groups, which are ignored and dropped by compaction
  (a rescale adopts files, it does not rewrite them).
* The files of the latest snapshot stay on disk until the next snapshot, whatever compaction does,
  so they can be uploaded asynchronously and adopted by a restore on this machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.spill.runs import RunFile, RunReader, RunWriter, schema
from state_store.spill.snapshots import SnapshotRun, SpillSnapshot

BINARY = pa.binary()
MIN_BUDGET = 512 << 10
"""The smallest store budget: 1 MiB of ``state_memory_mb`` less the page of keys a per-key function holds."""
BUFFER_FRACTION = 16
"""The write buffer is flushed as a run when it reaches ``budget / BUFFER_FRACTION`` bytes."""
FILE_FRACTION = 1
"""A run file holds about ``budget / FILE_FRACTION`` bytes at most (a larger run is split between blocks),
so an upload or a fetch, which holds one file in memory while the store is idle, stays within the
budget. Measured on ``tests/unit/disk_state/test_spill_memory.py``'s workload: smaller files cost
more peak RSS (4 per budget: 28 MB above base on a 16 MB budget; 2: 21 MB; 1: under 20 MB)."""
READ_FRACTION = 4
"""A read searches consecutive blocks of a run's key group together, up to ``budget / READ_FRACTION``
bytes (fewer, larger searches: each costs a fixed ~0.1 ms of Arrow calls whatever its size)."""
PRUNE_BELOW = 2
"""A read prunes a key group's blocks by the index only when it wants fewer than this many keys per
block; with more, nearly every block holds one, and one search of all of them costs less."""
MAX_FAN_IN = 6
"""A merge reads at most this many logical runs at once (more are merged in passes, newest first)."""
BLOCK_FRACTION = 32
"""A block of a run file (the unit a read or a merge holds) has at most about ``budget / BLOCK_FRACTION``
bytes. A merge of k runs holds a block of each (two where a run's files meet), the sorted keys and the
merged part: at most about 3 * (MAX_FAN_IN + 2) / 32 of the budget."""
_KG = "kg"
_SEQ = "seq"


class SpillStore:
    """Value state by (key group, key) for one subtask: batched get/put/delete, key-group iteration,
    snapshots as run-file lists. Create a fresh one with the constructor, a restored one with
    :func:`state_store.spill.restore.restore`."""

    def __init__(
        self,
        directory: Path,
        key_group_range: KeyGroupRange,
        *,
        memory_budget_bytes: int,
        key_type: pa.DataType = BINARY,
        value_type: pa.DataType = BINARY,
        max_runs: int = 4,
        block_bytes: int | None = None,
        _runs: Sequence[tuple[RunReader, RunFile]] = (),
    ) -> None:
        if memory_budget_bytes < MIN_BUDGET:
            raise BadInputError(
                f"state memory budget {memory_budget_bytes} bytes is too small:"
                " set state_memory_mb to at least 1"
            )
        directory.mkdir(parents=True, exist_ok=True)
        if not _runs and any(directory.iterdir()):
            raise BadInputError(
                f"spill directory {directory} is not empty:"
                " restore it from its snapshot or delete the directory"
            )
        self.directory = directory
        self.key_group_range = key_group_range
        self.budget = memory_budget_bytes
        self.key_type = key_type
        self.value_type = value_type
        self.max_runs = max_runs
        self.block_bytes = block_bytes or memory_budget_bytes // BLOCK_FRACTION
        """Blocks are cut at about this many bytes (tests pass a few bytes to cut every few rows)."""
        self.expires_field: str | None = None
        """A field of the value struct holding when the entry expires (epoch ms; null: never). With
        ``now_ms``, a merge that drops tombstones (a full compaction) drops expired entries too:
        Flink's TTL compaction filter. A partial merge keeps them (they still shadow older runs)."""
        self.now_ms: int | None = None
        self._schema = pa.schema(
            [(_KG, pa.int32()), ("key", key_type), ("value", value_type), (_SEQ, pa.int64())]
        )
        self._runs: list[tuple[RunReader, RunFile]] = list(_runs)
        self._seq = 1 + max((r.seq for r, _ in self._runs), default=0)
        self._buffer: list[pa.RecordBatch] = []
        self._buffer_bytes = 0
        self._writes = 0
        self._snapshot_files: set[str] = {f.name for _, f in self._runs}
        self._obsolete: list[Path] = []
        self.peak_buffer_bytes = 0
        self.peak_memory_bytes = 0
        """The store's own accounting of its peak: the write buffer plus what one read or merge held
        at once (its sorted copy of the buffer, the blocks it read or merged). The values a
        ``get`` returns belong to the caller's chunk and are not counted (as Flink's managed memory
        bounds RocksDB, not the records a task holds)."""

    # ------------------------------------------------------------------------------------ writes
    def put(self, key_groups: np.ndarray, keys: pa.Array, values: pa.Array) -> None:
        """Set ``values[i]`` for (``key_groups[i]``, ``keys[i]``); values must not be null."""
        if values.null_count:
            raise BadInputError("spill put: a value is null; delete the key with SpillStore.delete instead")
        self._append(key_groups, keys, values)

    def delete(self, key_groups: np.ndarray, keys: pa.Array) -> None:
        """Remove (``key_groups[i]``, ``keys[i]``); deleting an absent key is a no-op."""
        self._append(key_groups, keys, pa.nulls(len(keys), self.value_type))

    def _append(self, key_groups: np.ndarray, keys: pa.Array, values: pa.Array) -> None:
        kgs = self._checked_key_groups(key_groups, len(keys))
        if not keys.type.equals(self.key_type) or not values.type.equals(self.value_type):
            raise BadInputError(
                f"spill store holds {self.key_type} keys and {self.value_type} values, got {keys.type} and "
                f"{values.type}: cast the columns first"
            )
        if keys.null_count:
            raise BadInputError("spill store: a key is null; keys must be non-null")
        n = len(keys)
        whole = pa.record_batch(
            [
                pa.array(kgs),
                keys,
                values,
                pa.array(np.arange(self._writes, self._writes + n, dtype=np.int64)),
            ],
            schema=self._schema,
        )
        self._writes += n
        if whole.nbytes * BUFFER_FRACTION < self.budget:
            self._buffered(whole)
            return
        # A large write is buffered in pieces of at most budget/16, each copied (a slice would keep
        # the caller's whole arrays alive) and flushed in turn: the buffer never holds more.
        rows = max(1, int(n * self.budget / BUFFER_FRACTION / max(whole.nbytes, 1)) // 2)
        for lo in range(0, n, rows):
            piece = whole.slice(lo, rows)
            self._buffered(_copied(piece))

    def _buffered(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._buffer_bytes += batch.nbytes
        self.peak_buffer_bytes = max(self.peak_buffer_bytes, self._buffer_bytes)
        self._held(0)
        if self._buffer_bytes * BUFFER_FRACTION >= self.budget:
            self.flush()

    def _checked_key_groups(self, key_groups: np.ndarray, n: int) -> np.ndarray:
        kgs = np.asarray(key_groups, dtype=np.int32)
        if kgs.shape != (n,):
            raise BadInputError(
                f"spill store: {kgs.shape} key groups for {n} keys; pass one key group per key"
            )
        r = self.key_group_range
        if n and (int(kgs.min()) < r.first or int(kgs.max()) > r.last):
            bad = int(kgs[(kgs < r.first) | (kgs > r.last)][0])
            raise BadInputError(
                f"key group {bad} is outside this subtask's range {r.first}..{r.last}:"
                " route the key to its owner"
            )
        return kgs

    def _held(self, extra: int) -> None:
        self.peak_memory_bytes = max(self.peak_memory_bytes, self._buffer_bytes + extra)

    def flush(self) -> None:
        """Write the buffer as one sorted run (no-op when empty); compact when there are too many runs."""
        if not self._buffer:
            return
        table = _newest_per_key(pa.Table.from_batches(self._buffer, self._schema))
        self._held(self._buffer_bytes + table.nbytes)  # the buffer, its sorted keys, the result
        self._buffer, self._buffer_bytes = [], 0
        parts = dict(_split_by_key_group(table))
        self._write_run(list(parts), lambda kg: iter([parts[kg]]))
        if len(self._logical_runs()) > self.max_runs:
            self.compact()
        _release()

    def _write_run(
        self, key_groups: list[int], batches_of: Callable[[int], Iterator[pa.RecordBatch]]
    ) -> None:
        """One logical run of ``key_groups`` (ascending), ``batches_of(kg)`` (its entries in key
        order, in batches of any size) called once per key group in order; cut into blocks of about
        ``block_bytes``, written into files of about ``budget / FILE_FRACTION`` bytes each (a new
        file starts at the block that reaches it, inside a key group if need be: the files of one
        logical run hold disjoint keys), so that no file an upload or a fetch holds in memory
        exceeds that."""
        run_id = self._seq
        sch = schema(self.key_type, self.value_type, key_groups, run_id)
        plain = sch.remove_metadata()
        writer: RunWriter | None = None
        for kg in key_groups:
            for block in self._blocks(batches_of(kg)):
                if writer is not None and writer.size_with(block) > self.budget // FILE_FRACTION:
                    self._adopt(writer.close())
                    writer = None
                if writer is None:
                    writer = RunWriter(self.directory, self._seq, sch)
                writer.write(kg, block.cast(plain))
        if writer is not None:
            self._adopt(writer.close())

    def _adopt(self, file: RunFile) -> None:
        self._runs.append((RunReader(self.directory / file.name, self._seq, self.key_group_range), file))
        self._seq += 1

    def _blocks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` cut into slices of about ``block_bytes`` (at least one row each)."""
        for batch in batches:
            rows = max(1, batch.num_rows * self.block_bytes // max(batch.nbytes, 1))
            for lo in range(0, batch.num_rows, rows):
                yield batch.slice(lo, rows)

    def _logical_runs(self) -> list[list[tuple[RunReader, RunFile]]]:
        """The runs grouped into logical runs (consecutive files of one ``run_id``), oldest first."""
        return _logical(self._runs)

    def compact(self, everything: bool = False) -> None:
        """Size-tiered: merge the newest logical runs into one, reaching back over each older run no
        larger than twice what is merged so far (so runs of similar size merge, and a large old run
        is rewritten only when the newer ones have grown to half its size); when that reaches the
        oldest run (the base), or ``everything``, merge all of them and drop tombstones. One merge
        reads at most ``MAX_FAN_IN`` logical runs: more (after a rescale adopted many) are merged
        newest first, ``MAX_FAN_IN`` at a time, until the rule is met."""
        while len(logical := self._logical_runs()) >= 2:
            sizes = [sum(f.size for _, f in run) for run in logical]
            first = 0 if everything else len(logical) - 1
            merged = sizes[first]
            while first > 0 and (first == len(logical) - 1 or sizes[first - 1] <= 2 * merged):
                first -= 1
                merged += sizes[first]
            last = len(logical)
            truncated = last - first > MAX_FAN_IN
            if truncated:  # the MAX_FAN_IN neighbours of least size first: a tree of merges, not a chain
                first = min(
                    range(first, last - MAX_FAN_IN + 1), key=lambda i: (sum(sizes[i : i + MAX_FAN_IN]), -i)
                )
                last = first + MAX_FAN_IN
            parts = (logical[:first], logical[first:last], logical[last:])
            self._merge(*[[e for run in part for e in run] for part in parts])
            if not truncated:
                break
        _release()

    def _merge(
        self,
        before: list[tuple[RunReader, RunFile]],
        merging: list[tuple[RunReader, RunFile]],
        after: list[tuple[RunReader, RunFile]],
    ) -> None:
        """Replace ``merging`` (consecutive logical runs) by one logical run in their place, between
        the older runs ``before`` and the newer ``after``; without ``before``, drop tombstones."""
        groups = sorted({kg for r, _ in merging for kg in r.key_groups if kg in self.key_group_range})
        self._runs = before
        self._write_run(groups, lambda kg: self._merged(kg, merging, drop_tombstones=not before))
        self._runs += after
        for reader, file in merging:
            reader.close()
            self._obsolete.append(self.directory / file.name)
        self._delete_obsolete()

    def _merged(
        self, key_group: int, runs: Sequence[tuple[RunReader, RunFile]], drop_tombstones: bool
    ) -> Iterator[pa.RecordBatch]:
        """The newest entry per key of ``key_group`` over ``runs`` (oldest first), in key order, in
        parts: a streaming merge holding one block of each logical run (whose files hold disjoint
        key ranges, in order: one sequence of blocks).

        Each round merges, of every run's current block, the keys up to the bound: the smallest last
        key among the current blocks of runs that have further blocks (no bound when none has). A
        run's later blocks hold only larger keys, so every entry of a key up to the bound is in a
        current block; the run whose block set the bound finishes it, so each round moves on."""
        cursors = [_Cursor(i, _blocks_of(run, key_group)[0]) for i, run in enumerate(_logical(runs))]
        while cursors := [c for c in cursors if c.batch is not None]:
            bounded = [c for c in cursors if c.more]
            bound = min(c.last_key() for c in bounded) if bounded else None
            held = sum(c.held for c in cursors)
            parts = [c.take(bound, key_group, self._schema) for c in cursors]
            table = _newest_per_key(
                pa.Table.from_batches([p for p in parts if p.num_rows], self._schema),
                self._live if drop_tombstones else None,
            )
            self._held(2 * held + table.nbytes)  # the blocks, the sorted keys (at most as large), the result
            del parts
            if table.num_rows:
                yield pa.record_batch(
                    [table.column("key").combine_chunks(), table.column("value").combine_chunks()],
                    names=["key", "value"],
                )

    def _live(self, table: pa.Table) -> pa.Array:
        """Rows that are not tombstones and (with ``expires_field`` and ``now_ms``) not expired."""
        live = pc.is_valid(table.column("value"))
        if self.expires_field is not None and self.now_ms is not None:
            expires = pc.struct_field(table.column("value"), self.expires_field)
            live = pc.and_(live, pc.invert(pc.fill_null(pc.less_equal(expires, self.now_ms), False)))
        return live

    def _delete_obsolete(self) -> None:
        keep = []
        for path in self._obsolete:
            if path.name in self._snapshot_files:
                keep.append(path)
            else:
                path.unlink(missing_ok=True)
        self._obsolete = keep

    # ------------------------------------------------------------------------------------- reads
    def get(self, key_groups: np.ndarray, keys: pa.Array) -> pa.Array:
        """The value of each (``key_groups[i]``, ``keys[i]``), null where the key has none."""
        kgs = self._checked_key_groups(key_groups, len(keys))
        buffered = (
            _newest_per_key(pa.Table.from_batches(self._buffer, self._schema)) if self._buffer else None
        )
        buf_parts = dict(_split_by_key_group(buffered)) if buffered is not None else {}
        copied = buffered.nbytes if buffered is not None else 0
        self._held(self._buffer_bytes + copied)  # while sorting: the buffer's sorted keys too
        positions: list[np.ndarray] = []
        found: list[pa.Array] = []
        order = np.argsort(kgs, kind="stable")
        logical = self._logical_runs()
        for kg, idx in _groups(kgs[order], order):
            want = keys.take(pa.array(idx))
            todo = np.ones(len(idx), dtype=bool)
            batch = buf_parts.get(kg)
            if batch is not None:
                todo[self._searched([(batch, np.arange(len(idx)))], want, idx, positions, found, copied)] = (
                    False
                )
            for run in reversed(logical):  # the logical runs newest first
                if not todo.any():
                    break  # read no older run once every key is found
                blocks, last_keys = _blocks_of(run, kg)
                if not blocks:
                    continue
                group: list[tuple[pa.RecordBatch, np.ndarray]] = []  # blocks read, searched at once
                group_bytes = 0
                rows_todo = np.flatnonzero(todo)
                if last_keys is not None and len(rows_todo) < PRUNE_BELOW * len(blocks):
                    per_block = _rows_per_block(last_keys, want, todo)  # few keys: read only their blocks
                else:  # many keys: nearly every block holds one; search all of them for every key
                    per_block = [rows_todo] * len(blocks)
                for (reader, block), rows in zip(blocks, per_block, strict=True):
                    if not len(rows):
                        continue  # the index says no wanted key can be in this block
                    batch = reader.block(block)
                    if group and group_bytes + batch.nbytes > self.budget // READ_FRACTION:
                        todo[self._searched(group, want, idx, positions, found, copied)] = False
                        group, group_bytes = [], 0
                    group.append((batch, rows))
                    group_bytes += batch.nbytes
                if group:
                    todo[self._searched(group, want, idx, positions, found, copied)] = False
        _release()
        if not positions:
            return pa.nulls(len(keys), self.value_type)
        pos = np.concatenate(positions)
        vals = pa.concat_arrays(found)
        missing = np.setdiff1d(np.arange(len(keys)), pos, assume_unique=True)
        allpos = np.concatenate([pos, missing])
        allvals = pa.concat_arrays([vals, pa.nulls(len(missing), self.value_type)])
        return allvals.take(pa.array(np.argsort(allpos, kind="stable")))

    def _searched(
        self,
        group: list[tuple[pa.RecordBatch, np.ndarray]],
        want: pa.Array,
        idx: np.ndarray,
        positions: list[np.ndarray],
        found: list[pa.Array],
        copied: int,
    ) -> np.ndarray:
        """Look up, in consecutive blocks of one run's key group (each with the rows of ``want`` it
        may hold; rows may repeat between blocks), those rows; record the call positions
        (``idx[row]``) and values found; return the rows of ``want`` found. The blocks are searched
        as one (chunked) key column."""
        keys: pa.Array | pa.ChunkedArray
        values: pa.Array | pa.ChunkedArray
        if len(group) == 1:
            ((batch, rows),) = group
            keys, values = batch.column(0), batch.column(1)
            self._held(copied + batch.nbytes)
        else:
            rows = group[0][1]
            if any(r is not rows for _, r in group):  # pruned: each block its own rows
                rows = np.unique(np.concatenate([r for _, r in group]))  # sorted, as want's rows are
            keys = pa.chunked_array([b.column(0) for b, _ in group])
            values = pa.chunked_array([b.column(1) for b, _ in group])
            held = sum(b.nbytes + b.column(0).nbytes for b, _ in group)  # a search may copy the keys
            self._held(copied + held)
        hit = _find(keys, want if len(rows) == len(want) else want.take(pa.array(rows)))
        hits = hit >= 0
        if not hits.any():
            return rows[:0]
        positions.append(idx[rows[hits]])
        taken = values.take(pa.array(hit[hits]))
        found.append(taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken)
        return rows[hits]

    def key_groups(self) -> list[int]:
        """The key groups of this store's range that have entries in runs or the buffer (maybe deleted)."""
        groups = {kg for r, _ in self._runs for kg in r.key_groups}
        for b in self._buffer:
            groups.update(int(kg) for kg in np.unique(b.column(0).to_numpy()))
        return sorted(kg for kg in groups if kg in self.key_group_range)

    def items(self, key_group_range: KeyGroupRange | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(key group, batch of live ``key``/``value``) for every non-empty key group of
        ``key_group_range`` (default: the store's), in (key group, key) order; a key group may come
        in several batches. One block of each run in memory at a time."""
        wanted = (
            self.key_group_range
            if key_group_range is None
            else self.key_group_range.intersect(key_group_range)
        )
        self.flush()
        if len(self._logical_runs()) > MAX_FAN_IN:
            self.compact(everything=True)  # so the merge of every run below reads at most MAX_FAN_IN
        for kg in self.key_groups():
            if kg in wanted:
                for batch in self._merged(kg, self._runs, drop_tombstones=True):
                    yield kg, batch

    # ---------------------------------------------------------------------------------- snapshot
    def snapshot(self) -> SpillSnapshot:
        """Flush, then list the run files. They stay on disk until the next snapshot."""
        self.flush()
        runs = tuple(
            SnapshotRun(f, self.key_group_range if r.only is None else r.only) for r, f in self._runs
        )
        self._snapshot_files = {r.file.name for r in runs}
        self._delete_obsolete()
        return SpillSnapshot(self.key_group_range, self.key_type, self.value_type, runs)

    def snapshot_files(self) -> list[RunFile]:
        """The run files of the store now (after a snapshot: that snapshot's files)."""
        return [f for _, f in self._runs]

    @property
    def buffer_bytes(self) -> int:
        """Bytes held by the write buffer now (the store's own memory accounting)."""
        return self._buffer_bytes

    @property
    def disk_bytes(self) -> int:
        """Bytes of the live run files (not counting files kept only for the latest snapshot)."""
        return sum(f.size for _, f in self._runs)

    def close(self) -> None:
        for reader, _ in self._runs:
            reader.close()
        self._runs = []

    def __repr__(self) -> str:
        r = self.key_group_range
        return f"SpillStore({os.fspath(self.directory)!r}, {r.first}..{r.last}, runs={len(self._runs)})"


def _find(sorted_keys: pa.Array | pa.ChunkedArray, want: pa.Array) -> np.ndarray:
    """The row of each of ``want`` in ``sorted_keys`` (ascending, distinct), -1 where it is absent.

    Integer keys: a binary search (``np.searchsorted``, m log n). Other keys: a hash set of the m
    wanted keys probed by the n sorted ones, then a hash of the (at most m) matches -- never a hash
    table of the whole key group, which cost most of a read when 1% of the keys are looked up."""
    if not len(sorted_keys):
        return np.full(len(want), -1, dtype=np.int64)
    if pa.types.is_integer(sorted_keys.type):
        keys, wanted = sorted_keys.to_numpy(), want.to_numpy()
        rows = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1).astype(np.int64)
        return np.where(keys[rows] == wanted, rows, -1)
    matches = pc.indices_nonzero(pc.is_in(sorted_keys, value_set=want)).to_numpy()
    if not len(matches):
        return np.full(len(want), -1, dtype=np.int64)
    matched = sorted_keys.take(pa.array(matches))
    if isinstance(matched, pa.ChunkedArray):
        matched = matched.combine_chunks()
    hit = pc.fill_null(pc.index_in(want, value_set=matched), -1).to_numpy()
    return np.where(hit >= 0, matches[np.maximum(hit, 0)], -1).astype(np.int64)


def _copied(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch with buffers of its own (a slice shares, and keeps alive, its parent's)."""
    return pa.record_batch([pa.concat_arrays([c]) for c in batch.columns], schema=batch.schema)


def _release() -> None:
    """Hand freed Arrow memory back to the OS (mimalloc, Arrow's default pool, keeps it otherwise:
    measured 2x the budget in peak RSS without this)."""
    pa.default_memory_pool().release_unused()


def _newest_per_key(table: pa.Table, keep: Callable[[pa.Table], pa.Array] | None = None) -> pa.Table:
    """The last row (highest seq) of every (kg, key), sorted by (kg, key); with ``keep`` (a row mask
    of ``table``), only those of them it keeps. One copy of the result: the sort orders indices,
    only the kg and key columns are copied to find the last rows, then the rows kept are taken."""
    n = table.num_rows
    if n < 2 and keep is None:
        return table
    order = pc.sort_indices(table, sort_keys=[(_KG, "ascending"), ("key", "ascending"), (_SEQ, "ascending")])
    last = np.ones(n, dtype=bool)
    if n > 1:
        kg = table.column(_KG).take(order).combine_chunks()
        key = table.column("key").take(order).combine_chunks()
        differs = pc.or_(
            pc.not_equal(kg.slice(1), kg.slice(0, n - 1)), pc.not_equal(key.slice(1), key.slice(0, n - 1))
        )
        last[:-1] = differs.to_numpy(zero_copy_only=False)
        del kg, key
    if keep is not None:
        last &= keep(table).take(order).to_numpy(zero_copy_only=False)
    return table.take(order.filter(pa.array(last)))


def _split_by_key_group(table: pa.Table) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(kg, key/value batch) per key group of a table sorted by kg."""
    kgs = table.column(_KG).to_numpy()
    for kg, idx in _groups(kgs, np.arange(len(kgs))):
        part = table.slice(int(idx[0]), len(idx))
        yield (
            kg,
            pa.record_batch(
                [part.column("key").combine_chunks(), part.column("value").combine_chunks()],
                names=["key", "value"],
            ),
        )


def _groups(sorted_kgs: np.ndarray, idx: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    if not len(sorted_kgs):
        return
    bounds = np.flatnonzero(np.diff(sorted_kgs)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(sorted_kgs)], strict=True):
        yield int(sorted_kgs[lo]), idx[lo:hi]


def _logical(runs: Sequence[tuple[RunReader, RunFile]]) -> list[list[tuple[RunReader, RunFile]]]:
    """``runs`` grouped into logical runs (consecutive files of one ``run_id``), in order."""
    groups: list[list[tuple[RunReader, RunFile]]] = []
    for entry in runs:
        if groups and groups[-1][0][0].run_id == entry[0].run_id:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return groups


def _blocks_of(
    run: Sequence[tuple[RunReader, RunFile]], key_group: int
) -> tuple[list[tuple[RunReader, int]], pa.Array | None]:
    """The blocks of ``key_group`` in one logical run (its files hold disjoint key ranges, in key
    order: one sequence) and their last keys (None: version-1 files, one block per key group)."""
    blocks: list[tuple[RunReader, int]] = []
    last: list[pa.Array] = []
    for reader, _ in run:
        mine = reader.blocks(key_group)
        if mine:
            blocks += [(reader, b) for b in mine]
            keys = reader.last_keys(key_group)
            if keys is not None:
                last.append(keys)
    if len(blocks) < 2 or sum(len(k) for k in last) != len(blocks):
        return blocks, None
    return blocks, last[0] if len(last) == 1 else pa.concat_arrays(last)


def _rows_per_block(last_keys: pa.Array | None, want: pa.Array, todo: np.ndarray) -> list[np.ndarray]:
    """The rows of ``want`` still ``todo`` that each block of a key group may hold (one array per
    block): block j holds the keys above block j-1's last key up to its own; the last block gets
    every key above the others (``last_keys`` None: one block, it gets them all)."""
    rows = np.flatnonzero(todo)
    if last_keys is None:
        return [rows]
    n = len(last_keys)
    if pa.types.is_integer(last_keys.type):
        block = np.searchsorted(last_keys.to_numpy(), want.take(pa.array(rows)).to_numpy(), side="left")
    else:
        pending = want.take(pa.array(rows))
        block = np.full(len(rows), n - 1, dtype=np.int64)
        for j in range(n - 2, -1, -1):  # the first block whose last key is >= the key
            below = pc.less_equal(pending, last_keys[j]).to_numpy(zero_copy_only=False)
            block[below] = j
    block = np.minimum(block, n - 1)
    return [rows[block == j] for j in range(n)]


class _Cursor:
    """One logical run's position in a key group during a streaming merge: its current block (the
    rows not merged yet) and the blocks after it (over its files, in key order)."""

    def __init__(self, seq: int, blocks: list[tuple[RunReader, int]]) -> None:
        self.seq = seq
        self.batch: pa.RecordBatch | None = None
        self.held = 0
        self._todo = list(blocks)
        self._next()  # the first non-empty block (None: the run has none in this key group)

    @property
    def more(self) -> bool:
        return bool(self._todo)

    def last_key(self) -> Any:
        assert self.batch is not None
        return self.batch.column(0)[self.batch.num_rows - 1].as_py()

    def _next(self) -> None:
        self.batch, self.held = None, 0
        while self._todo and self.batch is None:
            reader, i = self._todo.pop(0)
            block = reader.block(i)
            if block.num_rows:
                self.batch, self.held = block, block.nbytes

    def take(self, bound: object, key_group: int, sch: pa.Schema) -> pa.RecordBatch:
        """The current block's rows with keys up to ``bound`` (all when None) as (kg, key, value,
        seq) rows; the cursor keeps the rest, or moves to its next block."""
        assert self.batch is not None
        batch = self.batch
        if bound is None:
            n = batch.num_rows
        else:
            n = int(
                pc.sum(pc.less_equal(batch.column(0), pa.scalar(bound, batch.column(0).type))).as_py() or 0
            )
        part = batch.slice(0, n)
        if n == batch.num_rows:
            self._next()
        else:
            self.batch = batch.slice(n)
        return pa.record_batch(
            [
                pa.array(np.full(n, key_group, dtype=np.int32)),
                part.column(0),
                part.column(1),
                pa.array(np.full(n, self.seq, dtype=np.int64)),
            ],
            schema=sch,
        )
