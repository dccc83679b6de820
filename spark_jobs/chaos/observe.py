"""Read-only observations of a job in a store, independent of the code under test's own
bookkeeping (the checkers must not trust what they check):

* :func:`committed_rows` -- the sink's committed rows in commit order (checkpoint, subtask, file);
* :func:`state_digest` -- every stateful operator's restored entries and timers plus the source
  positions of one completed checkpoint, independent of checkpoint ids and parallelism;
* :func:`positions_key` -- the input cut of a checkpoint (the same cut means the same state);
* :func:`completed_metadata` -- every decodable ``_metadata.json`` by id (verifying or not).
"""

from __future__ import annotations

from typing import Any

from spark_jobs.runtime.state_io import read_operator_restore
from spark_jobs.sinks import read_committed
from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, LatestPointer
from state_store.core.ports import ObjectNotFound, ObjectStore

Row = tuple[Any, ...]


def committed_rows(store: ObjectStore, job_id: str, sink_uid: str) -> list[Row]:
    table = read_committed(store, job_id, sink_uid)
    return [tuple(r.values()) for r in table.to_pylist()]


def positions_key(metadata: CompletedMetadata) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(metadata.barrier.ends().items()))


def state_digest(store: ObjectStore, metadata: CompletedMetadata, max_parallelism: int) -> dict[str, Any]:
    """What a restore from ``metadata`` gives every operator (all key groups), canonically sorted."""
    digest: dict[str, Any] = {"positions": positions_key(metadata)}
    everything = KeyGroupRange(0, max_parallelism - 1)
    for uid in sorted({t.task.uid for t in metadata.tasks}):
        entry: list[Any] = []
        restored, _ = read_operator_restore(store, metadata, uid, everything)
        if restored is not None:
            for part in restored.keyed:
                for kg, states in part.key_groups.items():
                    for name, rows in states.items():
                        entry.extend(
                            (kg, name, repr(r.key), repr(r.namespace), repr(r.value), r.expiry_ms)
                            for r in rows
                        )
            entry.extend(("timers", kg, repr(domains)) for kg, domains in sorted(restored.timers.items()))
        for task in metadata.tasks:
            source = task.parts.source if task.task.uid == uid else None
            if source is not None:
                entry.append(("source", repr(sorted(source.to_json().items()))))
        digest[uid] = sorted(entry, key=repr)
    return digest


def completed_metadata(
    store: ObjectStore, job_id: str, cache: dict[tuple[str, str], CompletedMetadata] | None = None
) -> dict[int, CompletedMetadata]:
    """Every decodable ``_metadata.json`` by id; ``cache`` (by key and version) skips re-decoding."""
    layout = JobLayout(job_id)
    cache = {} if cache is None else cache
    out: dict[int, CompletedMetadata] = {}
    for info in store.list(layout.checkpoints_prefix):
        checkpoint_id = layout.checkpoint_id_of(info.key)
        if checkpoint_id is None or not info.key.endswith("/_metadata.json"):
            continue
        token = (info.key, info.version)
        if token not in cache:
            try:
                cache[token] = documents.read(store, info.key, CompletedMetadata)
            except (ManifestError, ObjectNotFound):
                continue
        out[checkpoint_id] = cache[token]
    return out


def latest_pointer(store: ObjectStore, job_id: str) -> LatestPointer | str | None:
    """The LATEST pointer, None when absent, or the error text when it does not decode."""
    try:
        return documents.read_optional(store, JobLayout(job_id).latest, LatestPointer)
    except ManifestError as exc:
        return str(exc)
