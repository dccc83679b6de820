"""Operator snapshots to and from storage (incremental, per key group).

Writing (the asynchronous part of a snapshot; runs on a thread pool):
  * a key group is a chain of files: a full base and up to ``MAX_DELTA_CHAIN`` deltas holding the
    entries that changed (and tombstones of those deleted) since the previous checkpoint -- so
    bytes written follow the number of changed keys, not the state size (Flink's incremental
    checkpoints; our grain is the (state, key, namespace) entry, computed by diffing the snapshot
    against the restored base);
  * an unchanged key group references its chain as is; files are written content-addressed to
    ``shared/<uid>/<blake3>.arrow`` (create-only; an identical file already there is referenced),
    checksummed while written and verified by the store on upload (``checksums.put_checked``);
  * the key groups that changed are written together -- their full files and deltas side by side
    in one file of up to ``ROWS_PER_FILE`` rows (Flink's one file per subtask, with key groups
    inside), which each of their chains names as its new base or delta; the ack lists it once
    (a columnar operator's key groups are always written whole: its state turns over);
  * the ack's ``snapshot`` gets ``{"state_files": {kg: handle}, "timers": ..., "extra": ...}`` and
    every referenced file is also an ack handle, so completion verifies it and retention keeps it.
Reading (restore, any parallelism): the files of the key groups the subtask owns are fetched from
every old subtask's entry -- each file once, however many of those key groups it holds -- verified
(size and the checksum its handle names: BLAKE3, or SHA-256 for files written before handle format 2)
and decoded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from spark_jobs.api.functions import BATCH_STATE
from spark_jobs.runtime import spill_state
from spark_jobs.runtime.operators.base import OperatorRestore, OperatorSnapshot
from state_store.core import checksums, task_parts
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, StateHandle
from state_store.core.parallel import map_ordered, read_concurrency, write_concurrency
from state_store.core.ports import ObjectStore
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, RowColumns, StateRow
from state_store.formats.json_codec import key_from_jsonable, key_to_jsonable
from state_store.formats.keyed import decode_key_groups, encode_key_groups

STATE_FILES = task_parts.STATE_FILES


class StateRestoreError(RuntimeError):
    """A state file that is missing or does not match its recorded size or checksum."""


@dataclass
class WrittenSnapshot:
    handles: list[StateHandle] = field(default_factory=list)
    snapshot: dict[str, Any] = field(default_factory=dict)
    bytes_written: int = 0
    files_written: int = 0


def _handle_json(h: StateHandle) -> dict[str, Any]:
    return h.to_json()


def _handle(value: Mapping[str, Any]) -> StateHandle:
    """A handle of an ack's ``state_files`` (``checksum``, or a format-1 ``sha256``)."""
    return StateHandle.from_json(value, what="state file handle of an operator snapshot")


def timers_to_json(timers: Mapping[int, Mapping[str, list[list[Any]]]]) -> dict[str, Any]:
    return {
        str(kg): {
            domain: [[ts, key_to_jsonable(k), key_to_jsonable(ns)] for ts, k, ns in entries]
            for domain, entries in domains.items()
        }
        for kg, domains in timers.items()
    }


def _timers_from_json(
    value: Mapping[str, Any], wanted: KeyGroupRange
) -> dict[int, dict[str, list[list[Any]]]]:
    out: dict[int, dict[str, list[list[Any]]]] = {}
    for kg_text, domains in value.items():
        kg = int(kg_text)
        if kg in wanted:
            out[kg] = {
                d: [[ts, key_from_jsonable(k), key_from_jsonable(ns)] for ts, k, ns in entries]
                for d, entries in domains.items()
            }
    return out


UPLOAD_CONCURRENCY = 8
"""State files of one operator snapshot written at once (stores that declare
``max_concurrent_writes``; Flink's checkpoint transfer threads)."""
ROWS_PER_FILE = 262_144
"""Rows per state file: a snapshot writes the key groups that changed together, in files of up to
this many rows (Flink writes one file per subtask; the cap bounds memory and single uploads and
lets a large snapshot upload several files at once)."""
MAX_DELTA_CHAIN = 8
"""A key group's file chain is at most a base plus this many deltas; then a full file is written."""
MAX_DELTA_FRACTION = 0.5
"""A delta larger than this fraction of the key group's entries is written as a full file instead."""

Group = tuple[str, Any, Any]  # (state name, key, namespace)


_SINGLE_ROW_KINDS = frozenset({StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING})


def _groups(part: KeyedStateSnapshot, kg: int) -> dict[Group, tuple[StateRow, ...]]:
    """Rows of one key group by (state, key, namespace), in snapshot order. A single-value state
    has one row per entry (one dict comprehension); when it lists an entry twice (a corrupt file),
    the general path keeps both rows, so the backend's restore still refuses it."""
    out: dict[Group, tuple[StateRow, ...]] = {}
    for name, rows in part.key_groups.get(kg, {}).items():
        if part.kinds.get(name) in _SINGLE_ROW_KINDS:
            single = {(name, row[0], row[1]): (row,) for row in rows}
            if len(single) == len(rows):
                out.update(single)
                continue
        grouped: dict[Group, list[StateRow]] = {}
        for row in rows:
            grouped.setdefault((name, row.key, row.namespace), []).append(row)
        out.update((g, tuple(r)) for g, r in grouped.items())
    return out


def _part(
    template: KeyedStateSnapshot,
    kg: int,
    groups: Mapping[Group, tuple[StateRow, ...]],
    kinds: Mapping[str, StateKind],
) -> KeyedStateSnapshot:
    states: dict[str, list[StateRow]] = {}
    for (name, _, _), rows in groups.items():
        states.setdefault(name, []).extend(rows)
    return KeyedStateSnapshot(
        max_parallelism=template.max_parallelism,
        key_group_range=KeyGroupRange(kg, kg),
        kinds=kinds,
        key_groups={kg: {name: tuple(rows) for name, rows in states.items()}} if states else {},
    )


@dataclass
class KeyGroupChain:
    """A key group's files: a full base plus deltas (changed entries and deleted (state, key, ns))."""

    base: StateHandle
    deltas: list[tuple[StateHandle | None, list[list[Any]]]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "base": _handle_json(self.base),
            "deltas": [
                {"file": None if f is None else _handle_json(f), "deleted": d} for f, d in self.deltas
            ],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> KeyGroupChain:
        if "base" not in value:  # a plain handle: a full file
            return cls(_handle(value))
        deltas = [
            (None if d["file"] is None else _handle(d["file"]), list(d["deleted"])) for d in value["deltas"]
        ]
        return cls(_handle(value["base"]), deltas)

    def handles(self) -> list[StateHandle]:
        return [self.base, *(f for f, _ in self.deltas if f is not None)]


def _upload(
    store: ObjectStore, layout: JobLayout, uid: str, data: bytes, out: WrittenSnapshot
) -> StateHandle:
    digest = checksums.hex_of(data)  # BLAKE3: the content address and the checksum in one pass
    checksum = f"{checksums.STATE_FILE_ALGORITHM}:{digest}"
    key = layout.shared_file(uid, digest, "arrow")
    info = store.head(key)
    if info is None:
        checksums.put_checked(store, key, data, checksum, create_only=True)
    elif info.size != len(data) or checksums.mismatch(checksum, store.get(key).data) is not None:
        # Only a retry finds its content already there: an earlier failed write may have left it
        # torn or corrupted (a checkpoint referencing it then never verifies); write it whole again.
        checksums.put_checked(store, key, data, checksum)
    else:
        return StateHandle(key, len(data), checksum)
    out.bytes_written += len(data)
    out.files_written += 1
    return StateHandle(key, len(data), checksum)


def write_operator_snapshot(
    store: ObjectStore,
    layout: JobLayout,
    uid: str,
    snap: OperatorSnapshot,
    base: Mapping[int, RestoredKeyGroup],
) -> WrittenSnapshot:
    """Upload what changed since the restore base and describe the whole snapshot for the ack.

    Per non-empty key group: unchanged -> the base chain is referenced as is; changed -> a delta of
    the changed and deleted entries is appended to the chain, unless the chain is long or the delta
    large, in which case a full file starts a new chain. Files are content-addressed in ``shared/``.
    """
    out = WrittenSnapshot()
    files: dict[str, Any] = {}
    keyed = snap.keyed
    if keyed is not None:
        reusable = keyed.reusable_key_groups
        kgs = sorted(keyed.key_groups)
        reused = {kg: base[kg].chain for kg in kgs if kg in reusable and kg in base}
        todo = [kg for kg in kgs if kg not in reused]

        planned = {kg: _plan(keyed, kg, base.get(kg)) for kg in todo}
        batches = _batches([p for p in planned.values() if p.rows is not None])

        def write(
            batch: list[_Planned], keyed: KeyedStateSnapshot = keyed
        ) -> tuple[StateHandle, WrittenSnapshot]:
            part = WrittenSnapshot()
            together = KeyedStateSnapshot(
                max_parallelism=keyed.max_parallelism,
                key_group_range=KeyGroupRange(batch[0].kg, batch[-1].kg),
                kinds=keyed.kinds,
                key_groups={p.kg: p.rows for p in batch if p.rows},
            )
            return _upload(store, layout, uid, encode_key_groups(together, "arrow"), part), part

        handle_of: dict[int, StateHandle] = {}
        for batch, (handle, part) in zip(
            batches, map_ordered(write, batches, write_concurrency(store, UPLOAD_CONCURRENCY)), strict=True
        ):
            handle_of.update((p.kg, handle) for p in batch)
            out.bytes_written += part.bytes_written
            out.files_written += part.files_written
        for kg in kgs:
            chain = reused[kg] if kg in reused else planned[kg].chain(handle_of.get(kg))
            files[str(kg)] = chain.to_json()
            out.handles.extend(chain.handles())
        out.handles = referenced(out.handles)  # a file of several key groups is one handle
    out.snapshot = {STATE_FILES: files, "timers": timers_to_json(snap.timers), "extra": snap.extra}
    if snap.spill is not None:
        spilled = spill_state.write_spill(store, layout, uid, snap.spill)
        out.snapshot[spill_state.SPILL] = spilled.json
        out.handles = referenced([*out.handles, *spilled.handles])
        out.bytes_written += spilled.bytes_written
        out.files_written += spilled.files_written
    return out


def _is_columnar(keyed: KeyedStateSnapshot, kg: int) -> bool:
    return any(isinstance(rows, RowColumns) for rows in keyed.key_groups.get(kg, {}).values())


def _only(keyed: KeyedStateSnapshot, kgs: list[int]) -> KeyedStateSnapshot:
    """``keyed`` restricted to the key groups ``kgs`` (sorted), with the range they span."""
    return KeyedStateSnapshot(
        max_parallelism=keyed.max_parallelism,
        key_group_range=KeyGroupRange(kgs[0], kgs[-1]),
        kinds=keyed.kinds,
        key_groups={kg: keyed.key_groups[kg] for kg in kgs if kg in keyed.key_groups},
    )


@dataclass
class _Planned:
    """What one changed key group writes in this snapshot: ``rows`` (its states; None when a delta
    has only tombstones) and how its chain continues once the file holding the rows is known --
    a new chain (``previous`` None: the rows are the full key group) or one more delta."""

    kg: int
    rows: Mapping[str, tuple[StateRow, ...]] | None
    previous: KeyGroupChain | None = None
    tombstones: list[list[Any]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(rows) for rows in (self.rows or {}).values())

    def chain(self, handle: StateHandle | None) -> KeyGroupChain:
        if self.previous is None:
            if handle is None:
                raise AssertionError(f"key group {self.kg}: a full file was planned but not written")
            return KeyGroupChain(handle)
        delta = handle if self.rows is not None else None
        return KeyGroupChain(self.previous.base, [*self.previous.deltas, (delta, self.tombstones)])


def _plan(keyed: KeyedStateSnapshot, kg: int, previous: RestoredKeyGroup | None) -> _Planned:
    """A delta of the changed and deleted entries when the chain is short and the delta small;
    else the whole key group (always for a columnar operator, unless it gives its delta itself:
    ``KeyedStateSnapshot.entry_deltas``)."""
    given = keyed.entry_deltas.get(kg)
    if previous is not None and given is not None and len(previous.chain.deltas) < MAX_DELTA_CHAIN:
        changes = sum(len(rows) for rows in given.rows.values()) + len(given.deleted)
        if changes <= MAX_DELTA_FRACTION * max(given.size, 1):  # the operator's own delta
            tombstones = [[n, key_to_jsonable(key), key_to_jsonable(ns)] for n, key, ns in given.deleted]
            written = {name: r for name, r in given.rows.items() if len(r)}
            return _Planned(kg, written or None, previous.chain, tombstones)  # type: ignore[arg-type]
    if (
        previous is not None
        and not _is_columnar(keyed, kg)
        and len(previous.chain.deltas) < MAX_DELTA_CHAIN
        and _delta_may_fit(keyed, kg, previous)
    ):
        current = _groups(keyed, kg)
        changed = {g: rows for g, rows in current.items() if previous.groups.get(g) != rows}
        deleted = [g for g in previous.groups if g not in current]
        if len(changed) + len(deleted) <= MAX_DELTA_FRACTION * max(len(current), 1):
            tombstones = [[name, key_to_jsonable(key), key_to_jsonable(ns)] for name, key, ns in deleted]
            rows = _part(keyed, kg, changed, keyed.kinds).key_groups.get(kg) if changed else None
            return _Planned(kg, rows, previous.chain, tombstones)
    return _Planned(kg, keyed.key_groups[kg])


def _batches(planned: list[_Planned]) -> list[list[_Planned]]:
    """Consecutive key groups, up to ``ROWS_PER_FILE`` rows per file (a key group is never split;
    one larger than that gets a file of its own)."""
    batches: list[list[_Planned]] = []
    rows = 0
    for p in planned:
        if not batches or (rows + p.size > ROWS_PER_FILE and batches[-1]):
            batches.append([])
            rows = 0
        batches[-1].append(p)
        rows += p.size
    return batches


def _delta_may_fit(keyed: KeyedStateSnapshot, kg: int, previous: RestoredKeyGroup) -> bool:
    """False when the entries added and deleted alone already exceed ``MAX_DELTA_FRACTION`` (then
    the exact comparison in ``_next_chain`` would choose a full file too): set arithmetic on the
    entry keys instead of grouping and comparing every entry (a window's state turns over each
    epoch, so this is the usual case for window operators)."""
    entries = {(name, row[0], row[1]) for name, rows in keyed.key_groups.get(kg, {}).items() for row in rows}
    base = previous.groups.keys()
    lower_bound = len(entries - base) + len(base - entries)
    return lower_bound <= MAX_DELTA_FRACTION * max(len(entries), 1)


class RestoredKeyGroup:
    """A key group as restored: its file chain and its entries (the base of the next delta), given
    or grouped on first use from the decoded file (a columnar operator never compares against
    them: its changed key groups are written whole)."""

    __slots__ = ("_groups", "_lazy", "chain")

    def __init__(
        self,
        chain: KeyGroupChain,
        groups: dict[Group, tuple[StateRow, ...]] | None = None,
        *,
        lazy: Callable[[], dict[Group, tuple[StateRow, ...]]] | None = None,
    ) -> None:
        if (groups is None) == (lazy is None):
            raise ValueError("pass exactly one of groups and lazy")
        self.chain = chain
        self._groups = groups
        self._lazy = lazy

    @property
    def groups(self) -> dict[Group, tuple[StateRow, ...]]:
        if self._groups is None:
            assert self._lazy is not None
            self._groups, self._lazy = self._lazy(), None
        return self._groups


def task_snapshots(metadata: CompletedMetadata | None, uid: str) -> list[Mapping[str, Any]]:
    if metadata is None:
        return []
    return [t.snapshot for t in metadata.tasks if t.task.uid == uid]


def read_operator_restore(
    store: ObjectStore,
    metadata: CompletedMetadata | None,
    uid: str,
    key_groups: KeyGroupRange,
    *,
    int_rows: bool = False,
    spill_native: bool = False,
) -> tuple[OperatorRestore | None, dict[int, RestoredKeyGroup]]:
    """Fetch, verify and merge the state of ``uid`` for ``key_groups`` from a completed checkpoint.

    Returns the restore (None if the operator has no state there: a new operator starts empty)
    and every restored key group's chain and entries (the base of the next incremental snapshot).
    ``int_rows``: files of the columnar shape decode to ``IntRows`` (for a columnar operator).
    Spill stores (``spill_state``) go to ``OperatorRestore.spill`` as they are when
    ``spill_native`` (an operator keeping its state on disk fetches the run files itself), else
    their rows are decoded into ``keyed`` like any state file's (a heap-backed operator, a
    savepoint, an inspection).
    """
    entries = task_snapshots(metadata, uid)
    if metadata is None or not entries:
        return None, {}
    restore = OperatorRestore(checkpoint_id=metadata.checkpoint_id, trusted_key_groups=True)
    chains: dict[int, KeyGroupChain] = {}
    for entry in entries:
        for kg_text, value in entry.get(STATE_FILES, {}).items():
            kg = int(kg_text)
            if kg in key_groups:
                chains[kg] = KeyGroupChain.from_json(value)
        restore.timers.update(_timers_from_json(entry.get("timers", {}), key_groups))
        if entry.get("extra"):
            restore.extra.setdefault("parts", []).append(entry["extra"])
    spilled = spill_state.spill_sources(store, entries, key_groups)
    if spill_native:
        restore.spill = spilled
    elif spilled:
        restore.keyed.extend(
            spill_state.canonical_parts(spilled, key_groups, BATCH_STATE, now_ms=metadata.trigger_ms)
        )
    restored: dict[int, RestoredKeyGroup] = {}
    loaded = _load_all(store, chains, metadata.checkpoint_id, int_rows)  # each file once
    whole: dict[str, list[int]] = {}  # base file -> its key groups restored from it as they are
    for kg in sorted(chains):
        chain = chains[kg]
        first = loaded[chain.base.key]
        if not chain.deltas:
            restored[kg] = RestoredKeyGroup(chain, lazy=partial(_groups, first, kg))
            whole.setdefault(chain.base.key, []).append(kg)
            continue
        kinds = dict(first.kinds)
        groups = _groups(first, kg)
        for delta_file, deleted in chain.deltas:
            if delta_file is not None:
                delta = loaded[delta_file.key]
                kinds.update(delta.kinds)
                groups.update(_groups(delta, kg))
            for name, key, ns in deleted:
                groups.pop((name, key_from_jsonable(key), key_from_jsonable(ns)), None)
        restored[kg] = RestoredKeyGroup(chain, groups)
        restore.keyed.append(_part(first, kg, groups, kinds))
    for key, kgs in whole.items():
        first = loaded[key]
        if first.key_group_range == KeyGroupRange(kgs[0], kgs[-1]) and len(kgs) == len(first.key_group_range):
            restore.keyed.append(first)
            continue
        # the file also holds key groups restored otherwise (other subtasks', or with deltas): hand
        # over runs of consecutive key groups, so that no two parts' ranges overlap
        runs: list[list[int]] = []
        for kg in kgs:
            if runs and runs[-1][-1] == kg - 1:
                runs[-1].append(kg)
            else:
                runs.append([kg])
        restore.keyed.extend(_only(first, run) for run in runs)
    return restore, restored


def adopted_bases(
    metadata: CompletedMetadata,
    uid: str,
    key_groups: KeyGroupRange,
    kept: KeyedStateSnapshot | None,
    load: Callable[[], dict[int, RestoredKeyGroup]] | None = None,
) -> dict[int, RestoredKeyGroup]:
    """The incremental bases of an operator adopted by local recovery (``spark_jobs.runtime.warm``):
    each owned key group's file chain from the checkpoint's metadata, its entries from ``kept`` --
    the snapshot the adopted operator took for that very checkpoint -- or, when none was kept (a
    heap-backed operator: keeping its frozen snapshot costs more than it saves), read from the
    store by ``load`` the first time the incremental writer compares against them (once for all
    key groups; never for key groups it writes whole)."""
    memo: dict[str, dict[int, RestoredKeyGroup]] = {}

    def stored(kg: int) -> dict[Group, tuple[StateRow, ...]]:
        if "bases" not in memo:
            memo["bases"] = load() if load is not None else {}
        base = memo["bases"].get(kg)
        return base.groups if base is not None else {}

    bases: dict[int, RestoredKeyGroup] = {}
    for entry in task_snapshots(metadata, uid):
        for kg_text, value in entry.get(STATE_FILES, {}).items():
            kg = int(kg_text)
            if kg in key_groups:
                lazy = partial(_groups, kept, kg) if kept is not None else partial(stored, kg)
                bases[kg] = RestoredKeyGroup(KeyGroupChain.from_json(value), lazy=lazy)
    return bases


VERIFY_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads that fetch, verify (BLAKE3, or SHA-256 for older files) and decode state files at once:
both hashes and Arrow decoding release the GIL, so a restore of many files uses every core (BLAKE3
also spreads one large file over the cores, ``state_store.hashing``)."""


def _load_all(
    store: ObjectStore, chains: Mapping[int, KeyGroupChain], checkpoint_id: int, int_rows: bool
) -> dict[str, KeyedStateSnapshot]:
    """Every file of ``chains``, fetched once each, verified and decoded. Base files decode to
    ``IntRows`` when ``int_rows``. Errors come in file order (key-group order), as a sequential
    loop would raise them.

    A store whose reads are thread-safe (it declares ``max_concurrent_reads``: S3, local, memory)
    is read by ``max(VERIFY_THREADS, read_concurrency)`` threads, each fetching, verifying and
    decoding whole files, so the bytes are hashed while still in that core's caches: 1 GB on 2
    cores read in 0.29-0.31 s this way, 0.55-0.58 s when one thread fetched for two verifiers. A store
    read one call at a time (fault-injection wrappers, test doubles: their faults are consumed in
    call order) is fetched in order by the calling thread, and verified and decoded on
    ``VERIFY_THREADS`` meanwhile."""
    order: dict[str, StateHandle] = {}  # every file, in the order a key-group loop meets it
    columns: set[str] = set()  # base files
    for kg in sorted(chains):
        chain = chains[kg]
        columns.add(chain.base.key)
        for handle in chain.handles():
            order.setdefault(handle.key, handle)
    handles = list(order.values())
    if not handles:
        return {}

    def fetch(handle: StateHandle) -> bytes:
        try:
            return store.get(handle.key).data
        except Exception as exc:
            raise StateRestoreError(
                f"state file {handle.key} of checkpoint {checkpoint_id} cannot be read ({exc}); "
                "restore from an earlier checkpoint or a savepoint"
            ) from exc

    def check(handle: StateHandle, data: bytes) -> KeyedStateSnapshot:
        return _verified(handle, data, checkpoint_id, int_rows and handle.key in columns)

    def load(handle: StateHandle) -> KeyedStateSnapshot:
        return check(handle, fetch(handle))

    if len(handles) == 1:
        return {handles[0].key: load(handles[0])}
    declared = getattr(store, "max_concurrent_reads", None)
    if isinstance(declared, int) and not isinstance(declared, bool):
        workers = max(VERIFY_THREADS, read_concurrency(store, UPLOAD_CONCURRENCY))
        return {h.key: snap for h, snap in zip(handles, map_ordered(load, handles, workers), strict=True)}
    fetched = map_ordered(fetch, handles, 1)
    with ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="epochal-verify") as pool:
        futures: list[Future[KeyedStateSnapshot]] = []
        try:
            for handle, data in zip(handles, fetched):
                futures.append(pool.submit(check, handle, data))
        except Exception:
            for future in futures:  # an earlier file's error comes first
                future.result()
            raise
        return {h.key: f.result() for h, f in zip(handles, futures)}


def _verified(handle: StateHandle, data: bytes, checkpoint_id: int, int_rows: bool) -> KeyedStateSnapshot:
    actual = None if len(data) != handle.size else checksums.mismatch(handle.checksum, data)
    if len(data) != handle.size or actual is not None:
        found = f"{len(data)} bytes" if actual is None else f"{len(data)} bytes and checksum {actual}"
        raise StateRestoreError(
            f"state file {handle.key} of checkpoint {checkpoint_id} has {found}, the checkpoint says "
            f"{handle.size} bytes and {handle.checksum}: its bytes changed after it was written; "
            "restore from an earlier checkpoint or a savepoint"
        )
    return decode_key_groups(data, "arrow", source=handle.key, int_rows=int_rows)


def referenced(handles: Iterable[StateHandle]) -> list[StateHandle]:
    seen: dict[str, StateHandle] = {}
    for h in handles:
        seen.setdefault(h.key, h)
    return list(seen.values())
