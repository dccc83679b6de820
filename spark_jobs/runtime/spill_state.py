"""Value state of a keyed operator in a spill store on local disk (``Job(state_memory_mb=...)``).

The store (``state_store.spill``: sorted Arrow runs per key group, size-tiered compaction, a write
buffer of a fraction of the budget) holds one subtask's value state; the operator reads and writes
it a chunk at a time (``get``/``put``/``delete`` of Arrow columns), so the state may be many times
the budget. This module is the runtime's side of it:

* **where**: one directory per subtask attempt, ``<state_dir>/<job>/<uid>/s<subtask>-<random>``,
  deleted by ``dispose`` (or kept with the operator by local recovery, then adopted as is);
* **checkpoints**: a snapshot flushes the buffer and lists the run files; the upload writes the
  files the restore base does not list to ``shared/<uid>/<blake3>.arrow`` (content-addressed,
  create-only, checksummed by the writer and verified by the store) and references the rest, so a
  checkpoint ships the runs written since the checkpoint restored from (incremental: compaction
  writes new runs, which are shipped once). The ack's snapshot gets ``"spill"`` (JSON below) and
  every run file is an ack handle (completion checks it, retention keeps it);
* **restores**: the runs of every old subtask whose key groups meet the subtask's are fetched and
  verified (size + BLAKE3) into a fresh directory; a rescale reads only the key groups it owns from
  each adopted file (``state_store.spill.restore``);
* **the canonical form** (savepoints, ``state_digest``, a heap-backed operator restoring from a
  spill checkpoint): :func:`canonical_parts` decodes the runs of a key-group range into the rows a
  heap backend snapshots (state ``BATCH_STATE``, value = the list of the schema's field values), and
  :meth:`SpillValueState.load_rows` writes such rows into a store: so a savepoint, or a checkpoint,
  written by either backend restores on the other.

Ack JSON (``snapshot["spill"]``)::

    {"key_groups": [first, last],            the old subtask's range
     "max_parallelism": 128,
     "types": "<base64 Arrow schema: key, value>",
     "runs": [{"name": "00000003-<hex>.arrow", "key_groups": [a, b], "file": <state handle>}, ...]}

Invariants: a run file's bytes never change once named (its name ends in its digest), so a file in
the restore base is in the store already and is referenced, never re-uploaded; the keys of a store
are ``int64``, ``string`` or ``binary`` (integers of any width are widened); the value is a struct
of the operator's ``state_schema`` (a present key's struct is never null, its fields may be).
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.api.functions import BATCH_STATE
from spark_jobs.runtime.allocator import use_jemalloc_for_state_on_disk
from spark_jobs.runtime.keys import key_groups as key_groups_of
from state_store.core import checksums
from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout
from state_store.core.manifests import StateHandle
from state_store.core.ports import ObjectStore
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.key_rows import decode_key_rows, merged_states
from state_store.spill import (
    DamagedRunFileError,
    Fetch,
    RunFile,
    SnapshotRun,
    SpillSnapshot,
    SpillStore,
    restore,
)
from state_store.spill.restore import RestoreStats
from state_store.spill.runs import file_checksum

log = logging.getLogger(__name__)

SPILL = "spill"
"""The key of a spill store's part in an ack's snapshot."""
VALUE_FORM = "value"
"""A store's value is a struct of a batch process function's ``state_schema`` (state ``BATCH_STATE``)."""
ROWS_FORM = "rows"
"""A store's value is the text of all the keyed state of its key (``state_store.formats.key_rows``)."""


@dataclass(frozen=True)
class SpillPart:
    """What an operator's snapshot hands the uploader: the store's run files and their directory,
    and the names of the files the checkpoint restored from lists (in the store already)."""

    snapshot: SpillSnapshot
    directory: Path
    base: frozenset[str]
    max_parallelism: int
    form: str = VALUE_FORM
    kinds: Mapping[str, str] = field(default_factory=dict)
    """``ROWS_FORM``: the kind of every state name its keys hold (``StateKind`` values)."""


@dataclass(frozen=True)
class SpillSource:
    """One old subtask's spill snapshot in a completed checkpoint, and the handles of its files."""

    snapshot: SpillSnapshot
    handles: Mapping[str, StateHandle]
    max_parallelism: int
    fetch: Fetch
    """Writes a run file's bytes, read from the store, at a local path (unverified)."""
    form: str = VALUE_FORM
    kinds: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------- ack JSON
def _types_text(key_type: pa.DataType, value_type: pa.DataType) -> str:
    schema = pa.schema([("key", key_type), ("value", value_type)])
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _types(text: str) -> tuple[pa.DataType, pa.DataType]:
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    return schema.field("key").type, schema.field("value").type


def shared_handle(layout: JobLayout, uid: str, file: RunFile) -> StateHandle:
    """Where a run file lives in the store: ``shared/<uid>/<blake3>.arrow`` (content-addressed)."""
    digest = checksums.parse(file.checksum)[1]
    return StateHandle(layout.shared_file(uid, digest, "arrow"), file.size, file.checksum)


@dataclass
class WrittenSpill:
    json: dict[str, Any]
    handles: list[StateHandle]
    bytes_written: int = 0
    files_written: int = 0


def write_spill(store: ObjectStore, layout: JobLayout, uid: str, part: SpillPart) -> WrittenSpill:
    """Upload the run files of ``part`` that its base does not list; describe all of them."""
    snap = part.snapshot
    out = WrittenSpill({}, [])
    runs = []
    for run in snap.runs:
        handle = shared_handle(layout, uid, run.file)
        if run.file.name not in part.base and handle.key not in {h.key for h in out.handles}:
            written = _upload(store, handle, part.directory / run.file.name)
            out.bytes_written += written
            out.files_written += 1 if written else 0
        out.handles.append(handle)
        runs.append(
            {
                "name": run.file.name,
                "key_groups": [run.key_groups.first, run.key_groups.last],
                "file": handle.to_json(),
            }
        )
    r = snap.key_group_range
    out.json = {
        "key_groups": [r.first, r.last],
        "max_parallelism": part.max_parallelism,
        "types": _types_text(snap.key_type, snap.value_type),
        "runs": runs,
    }
    if part.form != VALUE_FORM:
        out.json["form"] = part.form
        out.json["kinds"] = dict(sorted(part.kinds.items()))
    out.handles = list({h.key: h for h in out.handles}.values())
    return out


def _upload(store: ObjectStore, handle: StateHandle, path: Path) -> int:
    """Write one run file (0 when an identical one is there: a retry after a failed attempt; its
    name is its digest and the store verified it when it was written). A run file holds about the
    budget at most (``state_store.spill.store.FILE_FRACTION``), so reading it whole while the store
    is idle stays within the budget."""
    info = store.head(handle.key)
    if info is not None and info.size == handle.size:
        return 0
    checksums.put_checked(store, handle.key, path.read_bytes(), handle.checksum, create_only=True)
    return handle.size


def spill_sources(
    store: ObjectStore, entries: Sequence[Mapping[str, Any]], key_groups: KeyGroupRange
) -> list[SpillSource]:
    """The spill parts of ``entries`` (one operator's task snapshots) whose range meets ``key_groups``."""
    out = []
    for entry in entries:
        value = entry.get(SPILL)
        if not value:
            continue
        first, last = value["key_groups"]
        rng = KeyGroupRange(int(first), int(last))
        if not len(rng.intersect(key_groups)):
            continue
        key_type, value_type = _types(value["types"])
        runs, handles = [], {}
        for run in value["runs"]:
            handle = StateHandle.from_json(run["file"], what="spill run file of an operator snapshot")
            a, b = run["key_groups"]
            runs.append(
                SnapshotRun(RunFile(run["name"], handle.size, handle.checksum), KeyGroupRange(int(a), int(b)))
            )
            handles[run["name"]] = handle
        snap = SpillSnapshot(rng, key_type, value_type, tuple(runs))
        out.append(
            SpillSource(
                snap,
                handles,
                int(value["max_parallelism"]),
                _fetcher(store, handles),
                str(value.get("form", VALUE_FORM)),
                dict(value.get("kinds", {})),
            )
        )
    return out


def _fetcher(store: ObjectStore, handles: Mapping[str, StateHandle]) -> Fetch:
    def fetch(file: RunFile, path: Path) -> None:
        handle = handles[file.name]
        key = handle.key
        try:
            data = store.get(key).data
        except Exception as exc:
            raise DamagedRunFileError(
                f"spill run file {key} cannot be read ({exc}); "
                "restore from an earlier checkpoint or a savepoint"
            ) from exc
        path.write_bytes(data)  # not fsynced: verified now and at every adoption (``write_run``)

    return fetch


def restored_store(
    sources: Sequence[SpillSource],
    directory: Path,
    key_group_range: KeyGroupRange,
    budget_bytes: int,
) -> tuple[SpillStore, RestoreStats]:
    """A store over ``directory`` with the state of ``sources`` for ``key_group_range`` (fetched,
    verified by ``state_store.spill.restore``; a damaged file is refused naming its store key:
    ``DamagedRunFileError``)."""
    use_jemalloc_for_state_on_disk()
    try:
        return restore(
            directory,
            [(s.snapshot, s.fetch) for s in sources],
            key_group_range,
            memory_budget_bytes=budget_bytes,
        )
    except DamagedRunFileError as exc:
        name = exc.name
        handle = next((s.handles[name] for s in sources if name is not None and name in s.handles), None)
        if handle is None:
            raise
        raise DamagedRunFileError(
            f"spill run file {handle.key} has {exc.found}, the checkpoint says {handle.size} bytes and "
            f"{handle.checksum}: its bytes changed after it was written; restore from an earlier "
            "checkpoint or a savepoint",
            exc.name,
            exc.found,
        ) from exc


# ---------------------------------------------------------------------------- canonical rows
CANONICAL_BUDGET = 64 << 20
"""The memory budget of the temporary store that decodes spill runs into canonical rows."""


def canonical_parts(
    sources: Sequence[SpillSource],
    key_group_range: KeyGroupRange,
    state_name: str,
    now_ms: int | None = None,
) -> list[KeyedStateSnapshot]:
    """The rows a heap backend would hold for the spill state of ``sources`` in ``key_group_range``:
    one ``StateRow(key, None, [field values], None)`` per live key of ``state_name`` (a value
    state), one part per source range met with ``key_group_range``. Reads through a temporary
    directory, deleted after."""
    parts = []
    for source in sources:
        rng = source.snapshot.key_group_range.intersect(key_group_range)
        if not len(rng):
            continue
        with tempfile.TemporaryDirectory(prefix="epochal-spill-read-") as tmp:
            spill, _ = restored_store([source], Path(tmp) / "s", rng, CANONICAL_BUDGET)
            try:
                if source.form == ROWS_FORM:
                    groups, kinds = _decoded(spill.items(), source.kinds, now_ms)
                else:
                    rows: dict[int, list[StateRow]] = {}
                    for kg, batch in spill.items():  # a key group may come in several batches
                        rows.setdefault(kg, []).extend(_rows(batch))
                    groups = {kg: {state_name: tuple(r)} for kg, r in rows.items()}
                    kinds = {state_name: StateKind.VALUE}
            finally:
                spill.close()
        parts.append(
            KeyedStateSnapshot(
                max_parallelism=source.max_parallelism,
                key_group_range=rng,
                kinds=kinds,
                key_groups=groups,
            )
        )
    return parts


def _decoded(
    batches: Iterator[tuple[int, pa.RecordBatch]], kinds: Mapping[str, str], now_ms: int | None
) -> tuple[dict[int, dict[str, tuple[StateRow, ...]]], dict[str, StateKind]]:
    """Key groups of rows-form batches (``key``, ``value.rows``) as snapshot rows (those expired at
    ``now_ms`` left out, as a heap backend's snapshot at that time leaves them), and their kinds."""
    decoded = (
        (kg, decode_key_rows(key, text, now_ms))
        for kg, batch in batches
        for key, text in zip(batch.column(0).to_pylist(), batch.column(1).field(0).to_pylist())
    )
    groups, found = merged_states(decoded)
    listed = {name: StateKind(kind) for name, kind in kinds.items()}
    return (
        {kg: {name: tuple(rows) for name, rows in states.items()} for kg, states in groups.items()},
        {**listed, **found},
    )


def _rows(batch: pa.RecordBatch) -> Iterator[StateRow]:
    keys = batch.column(0).to_pylist()
    values = batch.column(1)
    fields = [values.field(i).to_pylist() for i in range(values.type.num_fields)]
    for key, value in zip(keys, zip(*fields) if fields else itertools.repeat(())):
        yield StateRow(key, None, list(value), None)


# ------------------------------------------------------------------------------ the operator
def _json_type(t: pa.DataType) -> bool:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return True
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _json_type(t.value_type)
    if pa.types.is_struct(t):
        return all(_json_type(t.field(i).type) for i in range(t.num_fields))
    return False


def check_savepoint_types(what: str, schema: pa.Schema) -> None:
    """Refuse a state schema whose values the canonical form (JSON values: savepoints, the heap
    backend) cannot hold -- else a job would checkpoint on disk for weeks and fail at its first
    savepoint or backend switch."""
    for column in schema:
        if not _json_type(column.type):
            raise BadInputError(
                f"{what}: state_schema field {column.name!r} has type {column.type}, which savepoints "
                "cannot hold (state values are JSON: integers, floats, booleans, strings, lists and "
                "structs of them): cast it, e.g. a decimal to float64 or a timestamp to int64 milliseconds"
            )


def normal_keys(keys: pa.Array | pa.ChunkedArray, what: str) -> pa.Array:
    """Keys as the store holds them: integers widened to int64, large strings/binaries narrowed."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    t = keys.type
    if pa.types.is_integer(t):
        try:
            return keys.cast(pa.int64())
        except pa.ArrowInvalid:
            raise BadInputError(
                f"{what}: keys of type {t} above 2**63-1 cannot be kept on disk (state_memory_mb keeps "
                "int64, str or bytes keys): key the stream by a string of them, or set state_memory_mb=None"
            ) from None
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return keys
    if pa.types.is_large_string(t):
        return keys.cast(pa.string())
    if pa.types.is_large_binary(t):
        return keys.cast(pa.binary())
    if pa.types.is_null(t) and len(keys) == 0:
        return pa.array([], pa.int64())
    raise BadInputError(
        f"{what}: keys of type {t} cannot be kept on disk (state_memory_mb keeps int, str or bytes "
        "keys): key the stream by one column of those types, or set state_memory_mb=None"
    )


def claim_directory(root: str | None, job_id: str, uid: str, subtask: int) -> tuple[Path, int]:
    """A fresh spill directory for this attempt, ``<state_dir>/<job>/<uid>/s<subtask>-<id>``, and the
    descriptor of its lock file ``s<subtask>-<id>.lock`` beside it, flock'ed until :func:`release`
    (or the process's death). Directories of dead attempts -- their lock is free -- are deleted first."""
    base = Path(root) if root else Path(tempfile.gettempdir()) / "epochal-state"
    parent = base / job_id / uid
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _sweep(parent)
        while True:
            name = f"s{subtask}-{uuid.uuid4().hex[:12]}"
            lock = parent / f"{name}.lock"
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:  # not swept between create and lock
                return parent / name, fd
            os.close(fd)
    except OSError as exc:
        raise BadInputError(
            f"state_dir {base} cannot hold spill stores ({exc.strerror or exc}): "
            "set Job(state_dir=...) to a writable local directory"
        ) from exc


def _sweep(parent: Path) -> None:
    """Delete the spill directories under ``parent`` whose lock nobody holds (their attempt died)."""
    for lock in parent.glob("*.lock"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live attempt (this process's kept stores included)
        try:
            shutil.rmtree(parent / lock.stem, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


def release(directory: Path, fd: int) -> None:
    """Delete a claimed directory and its lock file, then let the lock go."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.with_name(directory.name + ".lock").unlink(missing_ok=True)
    os.close(fd)


class SpillValueState:
    """One value per key (a struct of ``schema``) in a spill store under ``budget_bytes``; its
    canonical rows are those of value state ``BATCH_STATE`` (:func:`canonical_parts`).

    The store is created on the first write (its key type is the first keys' type) or by
    ``restore``/``load_rows``; reads before that find nothing."""

    form = VALUE_FORM

    def __init__(
        self,
        what: str,
        claimed: tuple[Path, int],
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        budget_bytes: int,
        schema: pa.Schema,
    ) -> None:
        self.what = what
        self.directory, self._lock = claimed
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self.budget = budget_bytes
        self.schema = schema
        self.value_type = pa.struct(list(schema))
        self.store: SpillStore | None = None
        self.base: frozenset[str] = frozenset()
        """Names of the run files the checkpoint this state was restored from lists."""
        self.stats: RestoreStats | None = None

    # -- access ----------------------------------------------------------------------------------
    def _groups(self, keys: pa.Array) -> np.ndarray:
        return key_groups_of(keys, self.max_parallelism)

    def _keys(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        keys = normal_keys(keys, self.what)
        if self.store is not None and not keys.type.equals(self.store.key_type) and len(keys):
            raise BadInputError(
                f"{self.what}: keys of type {keys.type}, but its state on disk has {self.store.key_type} "
                "keys: key the stream by a column of one type"
            )
        return keys

    def _open(self, key_type: pa.DataType) -> SpillStore:
        if self.store is None:
            use_jemalloc_for_state_on_disk()
            self.store = SpillStore(
                self.directory,
                self.key_group_range,
                memory_budget_bytes=self.budget,
                key_type=key_type,
                value_type=self.value_type,
            )
            self._configure(self.store)
        return self.store

    def _configure(self, store: SpillStore) -> None:
        """Set up a store this state just created or restored (subclasses: a TTL filter)."""

    def set_now(self, now_ms: int) -> None:
        """The epoch's processing time (value state has no TTL: nothing to do)."""

    def get(self, keys: pa.Array, groups: np.ndarray | None = None) -> pa.Table:
        """One row per key: the fields of ``schema`` (nulls where a key has no state).
        ``groups``: the keys' key groups when the caller has them already."""
        keys = self._keys(keys)
        if self.store is None or not len(keys):
            return pa.table({f.name: pa.nulls(len(keys), f.type) for f in self.schema}, schema=self.schema)
        values = self.store.get(self._groups(keys) if groups is None else groups, keys)
        if not len(self.schema):
            return pa.table({}, schema=self.schema).slice(0, 0)
        # flatten: a key without state is a null struct, and its fields must read as nulls too
        return pa.Table.from_arrays(values.flatten(), schema=self.schema)

    def put(self, keys: pa.Array, values: pa.Table, groups: np.ndarray | None = None) -> None:
        """``values`` (the schema's columns, cast to its types) for ``keys``; a key's last row wins.
        ``groups``: the keys' key groups when the caller has them already."""
        keys = self._keys(keys)
        if not len(keys):
            return
        columns = [values.column(f.name).cast(f.type).combine_chunks() for f in self.schema]
        struct = (
            pa.StructArray.from_arrays(columns, fields=list(self.schema))
            if columns
            else pa.array([{}] * len(keys), self.value_type)
        )
        self._open(keys.type).put(self._groups(keys) if groups is None else groups, keys, struct)

    def delete(self, keys: pa.Array, groups: np.ndarray | None = None) -> None:
        keys = self._keys(keys)
        if self.store is not None and len(keys):
            self.store.delete(self._groups(keys) if groups is None else groups, keys)

    # -- checkpoints -----------------------------------------------------------------------------
    def snapshot(self) -> SpillPart | None:
        if self.store is None:
            return None
        snap = self.store.snapshot()
        return SpillPart(snap, self.directory, self.base, self.max_parallelism, self.form, self.kinds())

    def kinds(self) -> dict[str, str]:
        """The kinds of the states the store holds, for the ack (``ROWS_FORM`` only)."""
        return {}

    def snapshot_taken(self, part: SpillPart | None) -> None:
        """Local recovery adopted this state as the checkpoint of ``part``: its files are the base now."""
        self.base = frozenset() if part is None else frozenset(f.name for f in part.snapshot.files)

    def restore(self, sources: Sequence[SpillSource]) -> None:
        """The state of ``sources`` for this subtask's key groups (fetched and verified). Sources of
        another form (the job swapped a batch process function for a per-key one, or back) are
        decoded into canonical rows and written into the store."""
        met = [s for s in sources if len(s.snapshot.key_group_range.intersect(self.key_group_range))]
        used = [s for s in met if s.form == self.form]
        foreign = [s for s in met if s.form != self.form]
        if used:
            self._restore_native(used)
        if foreign:
            self.load_rows(canonical_parts(foreign, self.key_group_range, BATCH_STATE))

    def _restore_native(self, used: Sequence[SpillSource]) -> None:
        self.store, self.stats = restored_store(used, self.directory, self.key_group_range, self.budget)
        self.base = frozenset(f.name for s in used for f in s.snapshot.files)
        if not self.store.value_type.equals(self.value_type):
            raise BadInputError(
                f"{self.what}: the checkpoint's state holds {self.store.value_type}, the function's "
                f"state_schema is {self.value_type}: restore with the schema it was written with"
            )
        self._configure(self.store)

    def load_rows(self, parts: Sequence[KeyedStateSnapshot]) -> None:
        """Write canonical rows (a heap backend's snapshot: value = list of field values) into the
        store, a key group at a time (a heap checkpoint or a savepoint restored on disk)."""
        for part in parts:
            for kg, states in part.key_groups.items():
                rows = states.get(BATCH_STATE, ())
                if not len(rows):
                    continue
                keys = self._keys(pa.array([r.key for r in rows]))
                values = [r.value for r in rows]
                columns = {
                    f.name: pa.array([v[j] for v in values], f.type) for j, f in enumerate(self.schema)
                }
                table = pa.table(columns, schema=self.schema) if columns else pa.table({})
                self._check_groups(keys, kg)
                self.put(keys, table)

    def _check_groups(self, keys: pa.Array, kg: int) -> None:
        groups = self._groups(keys)
        if len(groups) and (groups != kg).any():
            raise BadInputError(
                f"{self.what}: restored state lists a key under key group {kg} that hashes elsewhere: "
                "restore from an earlier checkpoint or a savepoint"
            )

    def damaged_file(self) -> str | None:
        """The first local run file whose size or checksum no longer matches (None: all intact)."""
        if self.store is None:
            return None
        for file in self.store.snapshot_files():
            path = self.directory / file.name
            if not path.exists():
                return f"spill run file {path} is missing"
            if file_checksum(path) != (file.checksum, file.size):
                return f"spill run file {path} changed on disk"
        return None

    @property
    def disk_bytes(self) -> int:
        return 0 if self.store is None else self.store.disk_bytes

    @property
    def peak_memory_bytes(self) -> int:
        return 0 if self.store is None else self.store.peak_memory_bytes

    def dispose(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._lock >= 0:
            release(self.directory, self._lock)
            self._lock = -1
