"""One checkpoint folder as a history row: what its listing shows (:class:`Listing`) and the row
of the core read model's summary (``state_store.core.history.summarize``) plus the validation
column (:func:`checkpoint_row`); the reader and the history archive both build their rows here.
Reads only; nothing is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.history import ack_attempt, summarize
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    QuarantineRecord,
)
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.status import CheckpointStatus
from state_store.monitoring.model import CheckpointRow

DOCS = ("_pending.json", "_decision.json", "_metadata.json", "_validation.json", "_quarantined.json")


@dataclass(frozen=True, slots=True)
class Listing:
    """What the listing says about one checkpoint folder (no document read)."""

    docs: dict[str, str] = field(default_factory=dict)  # name -> version
    acks: dict[int, int] = field(default_factory=dict)  # attempt -> ack count
    attempts: int = 0
    fixed_token: str = ""  # set for an entry taken from the history archive (no listing behind it)

    def token(self) -> str:
        """A digest of what the listing shows (the archive stores it with each row)."""
        if self.fixed_token:
            return self.fixed_token
        parts = [f"{k}={v}" for k, v in sorted(self.docs.items())]
        parts += [f"a{a}={n}" for a, n in sorted(self.acks.items())] + [f"t={self.attempts}"]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def relist(
    store: ObjectStore, layout: JobLayout, known: dict[int, Listing], recent: int
) -> dict[int, Listing]:
    """Update a full listing without listing everything: re-list the folders that can still change
    (undecided checkpoints and the ``recent`` newest ones, which may get a validation result) and the
    new ids after the highest known one (ids are allocated as highest + 1, so they are contiguous)."""
    listed = dict(known)
    ids = sorted(known)
    changing = {i for i in ids if "_decision.json" not in known[i].docs} | set(ids[-recent:])
    for i in sorted(changing):
        found = list_checkpoints(store, layout, layout.checkpoint_dir(i)).get(i)
        if found is None:
            listed.pop(i, None)
        else:
            listed[i] = found
    n = (ids[-1] if ids else 0) + 1
    while n < 10**10:
        found = list_checkpoints(store, layout, layout.checkpoint_dir(n)).get(n)
        if found is None:
            break
        listed[n] = found
        n += 1
    return dict(sorted(listed.items()))


def list_checkpoints(store: ObjectStore, layout: JobLayout, within: str | None = None) -> dict[int, Listing]:
    """What the listing of ``checkpoints/`` (or of one folder ``within`` it) says, by checkpoint id."""
    out: dict[int, Listing] = {}
    prefix = layout.checkpoints_prefix
    for info in store.list(within or prefix):
        rest = info.key[len(prefix) :]
        folder, _, name = rest.partition("/")
        if not folder.startswith("chk-") or not folder[4:].isdigit():
            continue
        checkpoint_id = int(folder[4:])
        item = out.get(checkpoint_id)
        if item is None:
            item = out[checkpoint_id] = Listing()
        if name in DOCS:
            item.docs[name] = info.version
        elif name.startswith("acks/") and (attempt := ack_attempt(name)) is not None:
            item.acks[attempt] = item.acks.get(attempt, 0) + 1
        elif name.startswith("attempts/"):
            out[checkpoint_id] = Listing(item.docs, item.acks, item.attempts + 1)
    return dict(sorted(out.items()))


def validation_of(
    store: ObjectStore, layout: JobLayout, checkpoint_id: int, item: Listing
) -> tuple[str, str, int]:
    """(validation, detail, documents read) from ``_quarantined.json`` / ``_validation.json``."""
    base = layout.checkpoint_dir(checkpoint_id)
    if "_quarantined.json" in item.docs:
        try:
            record = documents.read(store, base + "_quarantined.json", QuarantineRecord)
            return "quarantined", record.message, 1
        except (ManifestError, ObjectNotFound) as exc:
            return "quarantined", str(exc), 1
    if "_validation.json" in item.docs:
        from state_store.validation.result import load_result

        try:
            result = load_result(store, base + "_validation.json")
        except (ManifestError, ObjectNotFound) as exc:
            return "failed", f"unreadable validation result: {exc}", 1
        return ("passed" if result.passed else "failed"), result.summary_line(), 1
    return "not_run", "", 0


def checkpoint_row(
    store: ObjectStore, layout: JobLayout, checkpoint_id: int, item: Listing
) -> tuple[CheckpointRow, int]:
    """One history row: the core read model's summary (``state_store.core.history.summarize``, fed
    with what the listing showed) plus the validation column; returns the row and how many
    documents were read."""
    summary, reads = summarize(store, layout, checkpoint_id, present=item.docs, acks_by_attempt=item.acks)
    if summary.status is CheckpointStatus.UNREADABLE:
        validation, detail = "not_run", ""
    else:
        validation, detail, n = validation_of(store, layout, checkpoint_id, item)
        reads += n
    row = CheckpointRow(
        checkpoint_id=checkpoint_id,
        status=summary.status.label(),
        trigger_ms=summary.trigger_ms,
        end_ms=summary.end_ms,
        acked=summary.acked,
        expected=summary.expected,
        state_size=summary.state_bytes,
        incremental_size=summary.incremental_bytes,
        alignment_ms=summary.alignment_ms,
        savepoint=summary.savepoint,
        generation=summary.generation,
        run_id=summary.run_id,
        validation=validation,
        validation_detail=detail,
        reason=summary.reason,
        restored_from=summary.restored_from,
    )
    return row, reads
