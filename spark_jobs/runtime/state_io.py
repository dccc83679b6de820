"""Operator snapshots to and from storage (incremental, one file per key group).

Writing (the asynchronous part of a snapshot; runs on a thread pool):
  * every non-empty key group that changed since the restore base is encoded (Arrow IPC) and
    written content-addressed to ``shared/<uid>/<sha256>.arrow`` (create-only; an identical file
    already there is simply referenced);
  * an unchanged key group references the file recorded for it in the base checkpoint;
  * the ack's ``snapshot`` gets ``{"state_files": {kg: handle}, "timers": ..., "extra": ...}`` and
    every referenced file is also an ack handle, so completion verifies it and retention keeps it.
Reading (restore, any parallelism): the files of the key groups the subtask owns are fetched from
every old subtask's entry, verified (size and SHA-256) and decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.runtime.operators.base import OperatorRestore, OperatorSnapshot
from state_store.core.codec import sha256_hex
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, StateHandle
from state_store.core.ports import ObjectStore
from state_store.formats.json_codec import key_from_jsonable, key_to_jsonable
from state_store.formats.keyed import decode_key_groups, encode_key_groups

STATE_FILES = "state_files"


class StateRestoreError(RuntimeError):
    """A state file that is missing or does not match its recorded size/SHA-256."""


@dataclass
class WrittenSnapshot:
    handles: list[StateHandle] = field(default_factory=list)
    snapshot: dict[str, Any] = field(default_factory=dict)
    bytes_written: int = 0
    files_written: int = 0


def _handle_json(h: StateHandle) -> dict[str, Any]:
    return {"key": h.key, "size": h.size, "sha256": h.sha256}


def _handle(value: Mapping[str, Any]) -> StateHandle:
    return StateHandle(str(value["key"]), int(value["size"]), str(value["sha256"]))


def _timers_to_json(timers: Mapping[int, Mapping[str, list[list[Any]]]]) -> dict[str, Any]:
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


def write_operator_snapshot(
    store: ObjectStore,
    layout: JobLayout,
    uid: str,
    snap: OperatorSnapshot,
    base_files: Mapping[int, StateHandle],
) -> WrittenSnapshot:
    """Upload the changed key groups of ``snap`` and describe the whole snapshot for the ack."""
    out = WrittenSnapshot()
    files: dict[str, Any] = {}
    keyed = snap.keyed
    if keyed is not None:
        reusable = keyed.reusable_key_groups
        for kg in sorted(keyed.key_groups):
            if kg in reusable and kg in base_files:
                handle = base_files[kg]
            else:
                data = encode_key_groups(keyed.part(KeyGroupRange(kg, kg)), "arrow")
                digest = sha256_hex(data)
                key = layout.shared_file(uid, digest, "arrow")
                if store.head(key) is None:
                    store.put_if_absent(key, data)
                    out.bytes_written += len(data)
                    out.files_written += 1
                handle = StateHandle(key, len(data), digest)
            files[str(kg)] = _handle_json(handle)
            out.handles.append(handle)
    out.snapshot = {STATE_FILES: files, "timers": _timers_to_json(snap.timers), "extra": snap.extra}
    return out


def task_snapshots(metadata: CompletedMetadata | None, uid: str) -> list[Mapping[str, Any]]:
    if metadata is None:
        return []
    return [t.snapshot for t in metadata.tasks if t.task.uid == uid]


def read_operator_restore(
    store: ObjectStore, metadata: CompletedMetadata | None, uid: str, key_groups: KeyGroupRange
) -> tuple[OperatorRestore | None, dict[int, StateHandle]]:
    """Fetch and verify the state of ``uid`` for ``key_groups`` from a completed checkpoint.

    Returns the restore (None if the operator has no state there: a new operator starts empty)
    and the base file of every restored key group (reused by the next incremental snapshot).
    """
    entries = task_snapshots(metadata, uid)
    if metadata is None or not entries:
        return None, {}
    restore = OperatorRestore(checkpoint_id=metadata.checkpoint_id)
    base: dict[int, StateHandle] = {}
    for entry in entries:
        for kg_text, value in entry.get(STATE_FILES, {}).items():
            kg = int(kg_text)
            if kg in key_groups:
                base[kg] = _handle(value)
        restore.timers.update(_timers_from_json(entry.get("timers", {}), key_groups))
        if entry.get("extra"):
            restore.extra.setdefault("parts", []).append(entry["extra"])
    for kg in sorted(base):
        restore.keyed.append(_load(store, base[kg], metadata.checkpoint_id))
    return restore, base


def _load(store: ObjectStore, handle: StateHandle, checkpoint_id: int) -> Any:
    try:
        data = store.get(handle.key).data
    except Exception as exc:
        raise StateRestoreError(
            f"state file {handle.key} of checkpoint {checkpoint_id} cannot be read ({exc}); "
            "restore from an earlier checkpoint or a savepoint"
        ) from exc
    digest = sha256_hex(data)
    if len(data) != handle.size or digest != handle.sha256:
        raise StateRestoreError(
            f"state file {handle.key} of checkpoint {checkpoint_id} has {len(data)} bytes and sha256 "
            f"{digest}, the checkpoint says {handle.size} bytes and {handle.sha256}; restore from an "
            "earlier checkpoint or a savepoint"
        )
    return decode_key_groups(data, "arrow", source=handle.key)


def referenced(handles: Iterable[StateHandle]) -> list[StateHandle]:
    seen: dict[str, StateHandle] = {}
    for h in handles:
        seen.setdefault(h.key, h)
    return list(seen.values())
