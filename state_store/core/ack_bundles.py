"""Ack bundles: one document per epoch run holding the acks its tasks wrote (a read cache).

Every subtask still writes its own create-only ack document (DESIGN.md section 3), and those
documents stay the protocol's source of truth. What an epoch run's driver adds, after its tasks
finished, is one ``ack-bundles/g<gen>-a<attempt>-<token>.json`` with each ack exactly as written
(``AckBundleEntry``: key, the version the store returned for that write, the document text). The
coordinator then lists the acks, reads the bundles, and fetches only the acks no bundle vouches
for: against S3 that is a couple of LIST pages and one GET instead of one GET per subtask (seed
001's coordinator receives acks by RPC; here they are objects, and requests cost client CPU).

Invariants (``read_acks``):

* the set of acks is the set of ack documents listed -- a bundle never adds an ack nor hides one;
* a bundle entry replaces the GET of ``key`` only if the listing reports exactly ``version`` for
  ``key`` and the entry's document passes the same envelope check (format, kind, SHA-256) as a read
  from the store; anything else -- a missing, corrupt or foreign bundle, a mismatched version, a
  torn entry -- falls back to reading that ack from the store, so a bad bundle costs requests,
  never correctness;
* results come back in key order, as a sequential read of the listing would give them.

Writing a bundle is best effort (``write_ack_bundle``): when it fails, completion reads the acks
one by one, as without bundles.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.manifests import AckBundleEntry, AckBundleRecord, AckRecord
from state_store.core.parallel import map_ordered
from state_store.core.ports import ObjectNotFound, ObjectStore

AckRead = tuple[str, AckRecord | str]
"""One listed ack: its key and the record, or ``"corrupt: ..."`` when it does not decode."""


def write_ack_bundle(
    store: ObjectStore,
    layout: JobLayout,
    checkpoint_id: int,
    generation: int,
    attempt: int,
    entries: Iterable[AckBundleEntry],
) -> str | None:
    """Write the acks of one epoch run as one bundle, create-only under a fresh token; return its
    key, or None when there is nothing to bundle. Entries are de-duplicated by key (a re-executed
    Spark task reports the same ack twice) and sorted by key."""
    unique = {entry.key: entry for entry in entries}
    if not unique:
        return None
    record = AckBundleRecord(checkpoint_id, generation, attempt, tuple(unique[k] for k in sorted(unique)))
    key = layout.ack_bundle(checkpoint_id, generation, attempt, uuid.uuid4().hex)
    documents.create(store, key, record)
    return key


def _bundled(store: ObjectStore, layout: JobLayout, checkpoint_id: int) -> dict[str, AckBundleEntry]:
    """Every entry of every readable bundle of checkpoint n for one of its acks, by ack key."""
    acks_prefix = layout.acks_prefix(checkpoint_id)
    entries: dict[str, AckBundleEntry] = {}
    for info in store.list(layout.ack_bundles_prefix(checkpoint_id)):
        try:
            bundle = documents.read(store, info.key, AckBundleRecord)
        except (ManifestError, ObjectNotFound):
            continue  # a torn or vanished bundle only costs the GETs it would have saved
        if bundle.checkpoint_id != checkpoint_id:
            continue
        for entry in bundle.acks:
            if entry.key.startswith(acks_prefix):
                entries[entry.key] = entry
    return entries


def read_acks(
    store: ObjectStore, layout: JobLayout, checkpoint_id: int, concurrency: int = 1
) -> list[AckRead]:
    """Every ack document of checkpoint n in key order (see the module invariants); acks no bundle
    vouches for are read with up to ``concurrency`` reads in flight. Store errors other than a
    vanished object raise (the first in key order)."""
    listed = list(store.list(layout.acks_prefix(checkpoint_id)))
    bundled = _bundled(store, layout, checkpoint_id) if listed else {}
    found: dict[str, AckRead] = {}
    for info in listed:
        entry = bundled.get(info.key)
        if entry is None or entry.version != info.version:
            continue
        try:
            found[info.key] = (info.key, documents.decode(entry.document.encode(), AckRecord, key=info.key))
        except ManifestError:
            continue  # a torn entry: read the ack itself

    def read(key: str) -> AckRead:
        try:
            return key, documents.read(store, key, AckRecord)
        except (ManifestError, ObjectNotFound) as exc:
            return key, f"corrupt: {exc}"

    missing = [info.key for info in listed if info.key not in found]
    for key, ack in map_ordered(read, missing, concurrency):
        found[key] = (key, ack)
    return [found[info.key] for info in listed]


__all__ = ["AckRead", "read_acks", "write_ack_bundle"]
