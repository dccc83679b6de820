"""Snapshots as data: the full state of a completed checkpoint or of a savepoint, engine-neutral.

:class:`Snapshot` is what restore, inspection, diff and savepoint writing share: per operator uid,
all keyed state (one :class:`KeyedStateSnapshot` over every key group) and its timers, plus the
source positions and watermark state. It is read from a completed checkpoint (merging its file
chains, verifying every file) or from a savepoint folder (any location: the savepoint is
self-contained and its manifest names files relative to itself).

Savepoint folder (canonical format, readable with pandas/DuckDB/Spark without Epochal)::

    <savepoint>/_metadata.json              versioned manifest (kind "savepoint"), relative paths
    <savepoint>/<uid>/state.parquet         every keyed-state row of the operator (all key groups)
    <savepoint>/<uid>/timers.json           pending timers per key group
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from spark_jobs.runtime.state_io import read_operator_restore
from state_store.core.codec import ManifestError, decode_document, encode_document, sha256_hex
from state_store.core.completed import load_completed
from state_store.core.errors import BadInputError
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout, validate_name
from state_store.core.manifests import CompletedMetadata
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.state.backend import KeyedStateBackend
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats.json_codec import key_from_jsonable, key_to_jsonable
from state_store.formats.keyed import decode_key_groups, encode_key_groups
from state_store.storage import open_store

SAVEPOINT_KIND = "savepoint"


class SnapshotError(ValueError, BadInputError):
    """A snapshot that cannot be used (missing, corrupt, of another job); says what to do."""


@dataclass
class OperatorState:
    uid: str
    parallelism: int
    keyed: KeyedStateSnapshot | None
    timers: dict[int, dict[str, list[list[Any]]]] = field(default_factory=dict)

    @property
    def kinds(self) -> dict[str, str]:
        return {} if self.keyed is None else {name: kind.value for name, kind in self.keyed.kinds.items()}


@dataclass
class Snapshot:
    """Full state of a job at one cut (see module docstring)."""

    job_id: str
    kind: str  # "checkpoint" | "savepoint"
    location: str
    checkpoint_id: int | None
    max_parallelism: int
    operators: dict[str, OperatorState]
    positions: dict[str, int]  # "<source uid>/<partition>" -> end offset
    sources: dict[str, list[dict[str, Any]]]  # source uid -> [{partition, max_ts, position}]


def _merge(parts: list[KeyedStateSnapshot], max_parallelism: int) -> KeyedStateSnapshot | None:
    if not parts:
        return None
    kinds: dict[str, StateKind] = {}
    groups: dict[int, dict[str, tuple[StateRow, ...]]] = {}
    for part in parts:
        kinds.update(part.kinds)
        for kg, states in part.key_groups.items():
            groups[kg] = dict(states)
    return KeyedStateSnapshot(max_parallelism, KeyGroupRange(0, max_parallelism - 1), kinds, groups)


def from_checkpoint(store: ObjectStore, job_id: str, checkpoint_id: int, max_parallelism: int) -> Snapshot:
    """Read and verify (every file read back: size and checksum) a completed checkpoint's state."""
    try:
        meta = load_completed(store, JobLayout(job_id), checkpoint_id, deep=True).metadata
    except ObjectNotFound:
        raise SnapshotError(
            f"checkpoint {checkpoint_id} of job {job_id} was not found (not completed, or removed by "
            "retention): see `epochal checkpoints list`"
        ) from None
    return from_metadata(store, meta, max_parallelism, f"{store.uri} checkpoint {checkpoint_id}")


def from_metadata(
    store: ObjectStore, meta: CompletedMetadata, max_parallelism: int, location: str
) -> Snapshot:
    everything = KeyGroupRange(0, max_parallelism - 1)
    operators: dict[str, OperatorState] = {}
    sources: dict[str, list[dict[str, Any]]] = {}
    for uid in sorted({t.task.uid for t in meta.tasks}):
        tasks = [t for t in meta.tasks if t.task.uid == uid]
        parts = [t.parts for t in tasks]
        if any(p.source is not None for p in parts):
            sources[uid] = [p.source.to_json() for p in parts if p.source is not None]
            continue
        if any(p.is_sink for p in parts):
            continue  # sinks keep no state across a snapshot: their output is committed or not
        restored, _ = read_operator_restore(store, meta, uid, everything)
        keyed = _merge(restored.keyed, max_parallelism) if restored else None
        operators[uid] = OperatorState(uid, len(tasks), keyed, dict(restored.timers) if restored else {})
    ends = meta.barrier.ends()
    return Snapshot(
        meta.job_id,
        "checkpoint",
        location,
        meta.checkpoint_id,
        max_parallelism,
        operators,
        ends,
        sources,
    )


# -- savepoints ------------------------------------------------------------------------------------
def savepoint_store(location: str) -> ObjectStore:
    """The store rooted at a savepoint folder: ``file:///path`` or ``s3://bucket/prefix?...``."""
    parts = urlsplit(location)
    if parts.scheme not in ("file", "s3", "memory"):
        raise SnapshotError(
            f"savepoint location {location!r} is invalid: use file:///path/to/savepoint or s3://bucket/prefix"
        )
    return open_store(location)


def savepoint_location(store_uri: str, job_id: str, name: str) -> str:
    """Where ``epochal savepoint`` puts savepoint ``name`` of a job: ``<root>/<job>/savepoints/<name>``."""
    validate_name("savepoint name", name)
    parts = urlsplit(store_uri)
    path = parts.path.rstrip("/") + f"/{job_id}/savepoints/{name}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def write_savepoint(
    snapshot: Snapshot, target: ObjectStore, name: str, *, fmt: str = "parquet", created_ms: int = 0
) -> dict[str, Any]:
    """Write ``snapshot`` as a self-contained savepoint into ``target`` (a store rooted at the
    savepoint folder); the manifest is written last, create-only. Returns the manifest body."""
    if fmt not in ("parquet", "arrow"):
        raise SnapshotError(f"savepoint format {fmt!r} is invalid: use parquet (canonical) or arrow (native)")
    if target.head("_metadata.json") is not None:
        raise SnapshotError(
            f"savepoint {name!r} already exists at {target.uri}: choose another name or dispose it"
        )
    operators: dict[str, Any] = {}
    for uid, op in sorted(snapshot.operators.items()):
        entry: dict[str, Any] = {"parallelism": op.parallelism, "kinds": op.kinds, "state": None}
        if op.keyed is not None and not op.keyed.is_empty():
            data = encode_key_groups(op.keyed, fmt)
            path = f"{uid}/state.{fmt}"
            target.put(path, data)
            entry["state"] = {
                "path": path,
                "size": len(data),
                "sha256": sha256_hex(data),
                "rows": op.keyed.num_rows,
            }
        timers = json.dumps(
            {
                str(kg): {
                    d: [[ts, key_to_jsonable(k), key_to_jsonable(ns)] for ts, k, ns in e]
                    for d, e in doms.items()
                }
                for kg, doms in op.timers.items()
            },
            sort_keys=True,
        ).encode()
        target.put(f"{uid}/timers.json", timers)
        entry["timers"] = {"path": f"{uid}/timers.json", "size": len(timers), "sha256": sha256_hex(timers)}
        operators[uid] = entry
    body = {
        "name": name,
        "job_id": snapshot.job_id,
        "format": fmt,
        "created_ms": created_ms,
        "checkpoint_id": snapshot.checkpoint_id,
        "max_parallelism": snapshot.max_parallelism,
        "positions": snapshot.positions,
        "sources": snapshot.sources,
        "operators": operators,
    }
    target.put_if_absent("_metadata.json", encode_document(SAVEPOINT_KIND, _Body(body)))
    return body


@dataclass(frozen=True)
class _Body:
    """Carrier for the manifest body (the codec encodes dataclasses)."""

    body: dict[str, Any]


def read_savepoint(location: str) -> Snapshot:
    """Read and verify a savepoint folder (any location; paths are relative to it)."""
    store = savepoint_store(location)
    try:
        raw = store.get("_metadata.json").data
    except ObjectNotFound:
        raise SnapshotError(
            f"no savepoint at {location}: _metadata.json is missing "
            "(check the path; `epochal savepoints list`)"
        ) from None
    try:
        body = decode_document(raw, SAVEPOINT_KIND, _Body, key=f"{location}/_metadata.json").body
    except ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    maxp = body["max_parallelism"]
    if not isinstance(maxp, int) or isinstance(maxp, bool) or not 1 <= maxp <= 32_768:
        raise SnapshotError(
            f"savepoint {location}/_metadata.json has max_parallelism {maxp!r}: it must be an integer "
            "1..32768; the manifest was altered: take the savepoint again"
        )
    operators: dict[str, OperatorState] = {}
    for uid, entry in body["operators"].items():
        keyed = None
        if entry.get("state"):
            data = _verified(store, location, entry["state"])
            source = f"{location}/{entry['state']['path']}"
            keyed = decode_key_groups(data, body["format"], source=source)
            _check_entries(keyed, maxp, source)
        timers_raw = json.loads(_verified(store, location, entry["timers"]))
        timers = {
            int(kg): {
                d: [[ts, key_from_jsonable(k), key_from_jsonable(ns)] for ts, k, ns in e]
                for d, e in doms.items()
            }
            for kg, doms in timers_raw.items()
        }
        operators[uid] = OperatorState(uid, int(entry["parallelism"]), keyed, timers)
    return Snapshot(
        body["job_id"],
        "savepoint",
        location,
        body.get("checkpoint_id"),
        maxp,
        operators,
        {k: int(v) for k, v in body["positions"].items()},
        body["sources"],
    )


def _check_entries(keyed: KeyedStateSnapshot, max_parallelism: int, source: str) -> None:
    """Every entry of a savepoint's state file sits in its key's key group (and none is listed
    twice): state enters Epochal's checkpoints here, and a restore from a checkpoint then trusts
    them (``OperatorRestore.trusted_key_groups``). Checked by loading them into a scratch backend."""
    try:
        KeyedStateBackend(KeyGroupRange(0, max_parallelism - 1), max_parallelism).restore([keyed])
    except ValueError as exc:
        raise SnapshotError(
            f"savepoint file {source} cannot be restored: {exc}; write savepoint state with "
            "state_store.formats.write_state_file from rows whose key groups come from "
            "state_store.core.keygroups.key_group_of"
        ) from None


def _verified(store: ObjectStore, location: str, ref: dict[str, Any]) -> bytes:
    try:
        data = store.get(ref["path"]).data
    except ObjectNotFound:
        raise SnapshotError(
            f"savepoint file {location}/{ref['path']} is missing: the copy is incomplete"
        ) from None
    if len(data) != ref["size"] or sha256_hex(data) != ref["sha256"]:
        raise SnapshotError(
            f"savepoint file {location}/{ref['path']} does not match its manifest (size or SHA-256): "
            "the copy is damaged; copy the savepoint folder again"
        )
    return data


def list_savepoints(store: ObjectStore, job_id: str) -> list[dict[str, Any]]:
    layout = JobLayout(job_id)
    out = []
    for info in store.list(layout.savepoints_prefix):
        if info.key.endswith("/_metadata.json"):
            name = info.key[len(layout.savepoints_prefix) :].split("/", 1)[0]
            out.append({"name": name, "key": info.key, "modified_ms": info.modified_ms})
    return out


def savepoint_keys(store: ObjectStore, job_id: str, name: str) -> list[str]:
    """Every key of savepoint ``name``; SnapshotError if there is no such savepoint."""
    prefix = JobLayout(job_id).savepoint_dir(name)
    keys = [i.key for i in store.list(prefix)]
    if prefix + "_metadata.json" not in keys:
        raise SnapshotError(
            f"savepoint {name!r} of job {job_id} does not exist (see `epochal savepoints list`)"
        )
    return keys


def dispose_savepoint(
    store: ObjectStore, job_id: str, name: str, fence: Callable[[], Any] = lambda: None
) -> int:
    """Delete savepoint ``name``: its manifest first (it stops being a savepoint), then its files.
    ``fence`` (the caller's lease check) runs before the first delete."""
    prefix = JobLayout(job_id).savepoint_dir(name)
    keys = savepoint_keys(store, job_id, name)
    fence()
    store.delete(prefix + "_metadata.json")
    for key in keys:
        store.delete(key)
    return len(keys)
