"""One checkpoint folder as a history row: what its listing shows (:class:`Listing`) and the row
its documents give (:func:`checkpoint_row`). The one place that turns a checkpoint's protocol
documents into monitoring's words (status, reason, sizes, validation); the reader and the history
archive both build their rows here. Reads only; nothing is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    CompletedMetadata,
    DecisionRecord,
    Outcome,
    PendingRecord,
    QuarantineRecord,
    TaskSnapshot,
)
from state_store.core.ports import ObjectNotFound, ObjectStore
from state_store.core.status import CheckpointStatus, status_of
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
        elif name.startswith("acks/") and "-a" in name:
            attempt = name.rsplit("-a", 1)[1].removesuffix(".json")
            if attempt.isdigit():
                item.acks[int(attempt)] = item.acks.get(int(attempt), 0) + 1
        elif name.startswith("attempts/"):
            out[checkpoint_id] = Listing(item.docs, item.acks, item.attempts + 1)
    return dict(sorted(out.items()))


def incremental_bytes(layout: JobLayout, task: TaskSnapshot) -> int:
    """Bytes this task uploaded for the checkpoint: its ``bytes_written`` metric, else the size of
    the files it references outside ``shared/`` (those are exclusive to this checkpoint)."""
    written = task.metrics.get("bytes_written")
    if isinstance(written, int) and not isinstance(written, bool):
        return written
    return sum(h.size for h in task.handles if not h.key.startswith(layout.shared_prefix))


def alignment_ms(metrics: Sequence[dict[str, Any]]) -> int | None:
    values = [int(m["alignment_ms"]) for m in metrics if isinstance(m.get("alignment_ms"), int | float)]
    return max(values) if values else None


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
    """Build one history row; returns the row and how many documents were read."""
    reads = 1
    try:
        pending = documents.read(store, layout.pending(checkpoint_id), PendingRecord)
        meta = decision = None
        if "_metadata.json" in item.docs:
            meta = documents.read(store, layout.metadata(checkpoint_id), CompletedMetadata)
            reads += 1
        elif "_decision.json" in item.docs:
            decision = documents.read(store, layout.decision(checkpoint_id), DecisionRecord)
            reads += 1
    except (ManifestError, ObjectNotFound) as exc:
        row = CheckpointRow(
            checkpoint_id,
            CheckpointStatus.UNREADABLE.label(),
            0,
            None,
            0,
            0,
            0,
            0,
            None,
            False,
            0,
            "",
            "not_run",
            reason=str(exc),
        )
        return row, reads
    validation, detail, n = validation_of(store, layout, checkpoint_id, item)
    reads += n
    restored = pending.barrier.restored_from or ""
    expected = len(pending.expected)
    common: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "trigger_ms": pending.trigger_ms,
        "expected": expected,
        "savepoint": pending.properties.savepoint,
        "generation": pending.generation,
        "run_id": pending.request_id,
        "validation": validation,
        "validation_detail": detail,
        "restored_from": restored,
    }
    if meta is not None:
        return (
            CheckpointRow(
                status=CheckpointStatus.COMPLETED.label(),
                end_ms=meta.completed_ms,
                acked=len(meta.tasks),
                state_size=meta.state_size,
                incremental_size=sum(incremental_bytes(layout, t) for t in meta.tasks),
                alignment_ms=alignment_ms([t.metrics for t in meta.tasks]),
                **common,
            ),
            reads,
        )
    acked = min(item.acks.get(max(item.acks, default=0), 0), expected)
    if decision is not None and decision.outcome is Outcome.ABORT:
        return (
            CheckpointRow(
                status=CheckpointStatus.ABORTED.label(),
                end_ms=decision.decided_ms,
                acked=acked,
                state_size=0,
                incremental_size=0,
                alignment_ms=None,
                reason=f"{decision.reason}: {decision.message}".rstrip(": "),
                **common,
            ),
            reads,
        )
    status = status_of(has_metadata=False, decided=decision is not None, aborted=False).label()
    row = CheckpointRow(
        status=status, end_ms=None, acked=acked, state_size=0, incremental_size=0, alignment_ms=None, **common
    )
    return row, reads
