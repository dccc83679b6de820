"""The savepoints of a job as the Checkpoints view lists them (``<job>/savepoints/<name>/_metadata.json``).

Reads each manifest's envelope through the codec (kind ``savepoint``); a manifest that does not decode,
or a folder whose name is no savepoint name (the store's keys allow more), is listed with its error,
never hidden; a savepoint deleted between the listing and the read is not listed. Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state_store.core.codec import ManifestError, decode_document
from state_store.core.layout import InvalidNameError, JobLayout
from state_store.core.ports import ObjectNotFound, ObjectStore

KIND = "savepoint"


@dataclass(frozen=True, slots=True)
class _Body:
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SavepointInfo:
    name: str
    location: str  # the URI the restore and backfill DAGs take as their source
    checkpoint_id: int | None  # the checkpoint it was taken as (lineage)
    created_ms: int | None
    format: str
    error: str = ""


def list_savepoints(store: ObjectStore, job_id: str) -> list[SavepointInfo]:
    """Newest first (by creation time, then name)."""
    layout = JobLayout(job_id)
    found = []
    for info in store.list(layout.savepoints_prefix):
        rest = info.key[len(layout.savepoints_prefix) :]
        name, _, tail = rest.partition("/")
        if tail != "_metadata.json":
            continue
        location = f"{store.uri.rstrip('/')}/{layout.savepoints_prefix}{name}"
        try:
            layout.savepoint_dir(name)
            raw = store.get(info.key).data
            body = decode_document(raw, KIND, _Body, key=info.key).body
        except ObjectNotFound:
            continue  # deleted since the listing: gone, not broken
        except (ManifestError, InvalidNameError) as exc:
            why = f"not a valid savepoint name: {exc}" if isinstance(exc, InvalidNameError) else str(exc)
            found.append(SavepointInfo(name, location, None, info.modified_ms, "?", why))
            continue
        checkpoint = body.get("checkpoint_id")
        created = body.get("created_ms")
        found.append(
            SavepointInfo(
                name=name,
                location=location,
                checkpoint_id=checkpoint if isinstance(checkpoint, int) else None,
                created_ms=created if isinstance(created, int) else info.modified_ms,
                format=str(body.get("format", "?")),
            )
        )
    return sorted(found, key=lambda s: (-(s.created_ms or 0), s.name))
