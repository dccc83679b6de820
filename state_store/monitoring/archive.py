"""The checkpoint history archive: summary rows of decided checkpoints that outlive retention.

Retention deletes old checkpoint folders, and a statistics scan that starts from the folders alone
must list and read every one of them. The archive keeps one :class:`CheckpointRow` per decided
(completed or failed) checkpoint under ``<job>/history/`` (``JobLayout.history_segment``), so the
history covers every checkpoint ever archived and a cold start reads a few segments plus the folders
the archive does not describe yet.

Segments
--------
A segment is an immutable, checksummed document (the codec's versioned envelope, kind
``checkpoint-history``) written create-only. Its key names only the range of *writes* it covers
(``seg-<first_seq>-<last_seq>.json``), so two writers of one write number race for one key. One writer
run writes the rows that are new or changed since the archive (at most :data:`SEAL_ROWS` per segment)
as single-write segments ``seq..seq``; once :data:`FANOUT` unsealed segments (< ``SEAL_ROWS`` rows)
follow the last sealed one, they are merged into one segment covering their whole write range and
the merged inputs are deleted. The merged cover is the widest valid segment of each write range.
So a cold start reads about ``archived / SEAL_ROWS + FANOUT`` documents. Each archived row also
carries what the listing showed for its folder (document versions, ack and attempt counts), so a
reader can reuse it for a live folder whose listing is unchanged without reading that folder.

Invariants
----------
* **Archive before delete.** :func:`archive_history` runs in the epoch cycle's retention step before
  ``apply_retention`` and archives every decided checkpoint whose folder is present, so a decided
  checkpoint's row is in the archive before retention may delete its folder. The one gap is a
  checkpoint decided between the archive write and retention's own listing by a concurrent cycle of
  the same job (Airflow runs one at a time) -- its row is lost when retention deletes it.
* **Monitoring is best effort.** If archiving fails, the cycle logs a warning and retention still runs
  (an archive problem must not make storage grow without bound or fail an epoch); the rows of the
  checkpoints retention then deletes are missing from the history.
* **Later wins.** Merging segments in write order, a later row for the same id replaces an earlier one
  (a row is archived again when its folder changed, e.g. a validation result written later); and in
  the statistics, a live folder's row replaces the archived one.
* **Idempotent and race-safe.** A run with nothing new writes nothing. Two writers that compute the
  same segment write the same bytes under the same key (create-only accepts identical bytes); if the
  key holds other bytes, the loser re-reads the archive and retries (its rows may now be archived).
  Merges are deterministic functions of their inputs, and inputs are only deleted after the merged
  segment is stored (a reader that loses an input to a concurrent merge skips it and sees the merged
  segment at its next scan).
* **Corruption is contained.** A segment that fails to decode (torn, altered, wrong kind or a body
  that does not match its key) is skipped with a warning; a narrower segment of the same writes is
  used if one is left, and the writer archives again the rows of live folders the archive lacks, so
  rows are rebuilt from the folders still present (the rows of folders already deleted are lost).
* ``open_ids`` of the newest segment are the checkpoints that had a folder but no final decision at
  that write (in flight, completing, unreadable): the reader lists those folders even below the
  archive's highest id. Everything above the highest archived id is new (ids are allocated as
  highest + 1), so a cold reader probes ``high + 1, high + 2, ...``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import types
import typing
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from state_store.core.codec import (
    FORMAT_VERSION,
    ManifestError,
    UnsupportedFormatVersion,
    canonical_json,
    sha256_hex,
)
from state_store.core.layout import JobLayout
from state_store.core.ports import ObjectAlreadyExists, ObjectNotFound, ObjectStore, StoreError
from state_store.monitoring.model import CheckpointRow
from state_store.monitoring.rows import Listing, checkpoint_row, list_checkpoints

KIND = "checkpoint-history"
SEAL_ROWS = 1000
FANOUT = 16
FINAL = ("completed", "failed")
_NAME = re.compile(r"seg-(\d{8})-(\d{8})\.json$")
log = logging.getLogger(__name__)
_STAND_IN = {"_pending.json": "", "_decision.json": ""}


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """A history row and the digest of what the listing of its folder showed when it was archived."""

    row: CheckpointRow
    token: str

    @staticmethod
    def of(row: CheckpointRow, item: Listing) -> ArchivedRow:
        return ArchivedRow(row, item.token())

    def listed(self) -> Listing:
        """A stand-in for the folder's listing: decided, with the archived token."""
        return Listing(dict(_STAND_IN), {}, 0, self.token)


@dataclass(frozen=True, slots=True)
class HistorySegment:
    job_id: str
    first_seq: int
    last_seq: int
    rows: tuple[ArchivedRow, ...]  # ascending by checkpoint id, one per id
    open_ids: tuple[int, ...] = ()

    @property
    def sealed(self) -> bool:
        return len(self.rows) >= SEAL_ROWS


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What a segment's key (and the listing) says about it."""

    key: str
    version: str
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class ArchiveView:
    """The merged archive of one job (see the module invariants)."""

    rows: dict[int, ArchivedRow]
    open_ids: frozenset[int]
    cover: tuple[tuple[SegmentRef, HistorySegment], ...]  # the segments merged, in write order
    listed: tuple[SegmentRef, ...]  # every segment key listed
    corrupt: tuple[str, ...]
    reads: int

    @property
    def high_id(self) -> int:
        return max(self.rows, default=0)

    @property
    def next_seq(self) -> int:
        return max((r.last_seq for r in self.listed), default=0) + 1

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for ref, _ in self.cover:
            digest.update(f"{ref.key}={ref.version}\n".encode())
        return digest.hexdigest()


_COLUMNS = tuple(f.name for f in dataclasses.fields(CheckpointRow))


def encode_segment(segment: HistorySegment) -> bytes:
    """The codec's envelope (``format_version``, ``kind``, ``body``, ``sha256`` of the canonical body)
    around a columnar body: one JSON array per row, in the order of ``columns`` (the fields of
    :class:`CheckpointRow`, then the listing token) -- compact and fast to decode."""
    body = {
        "job_id": segment.job_id,
        "first_seq": segment.first_seq,
        "last_seq": segment.last_seq,
        "columns": [*_COLUMNS, "listing"],
        "rows": [[*(getattr(r.row, c) for c in _COLUMNS), r.token] for r in segment.rows],
        "open_ids": list(segment.open_ids),
    }
    envelope = {
        "format_version": FORMAT_VERSION,
        "kind": KIND,
        "body": body,
        "sha256": sha256_hex(canonical_json(body)),
    }
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _allowed(tp: Any) -> frozenset[type]:
    """The exact JSON value types a CheckpointRow field accepts (``type(v)``, so bool is not an int)."""
    if tp in (bool, int, str):
        return frozenset({tp})
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _allowed(inner) | {type(None)}
    raise TypeError(f"CheckpointRow field type {tp!r} has no JSON type check")


_ROW_HINTS = typing.get_type_hints(CheckpointRow)
_ALLOWED = (*(_allowed(_ROW_HINTS[c]) for c in _COLUMNS), frozenset({str}))


def _raw_body_matches(raw: bytes, envelope: dict[str, Any]) -> bool:
    """Fast checksum: :func:`encode_segment` writes the body's canonical JSON verbatim between
    ``{"body":`` and the sorted envelope fields, so hashing those bytes avoids re-encoding the body.
    False (then the caller re-encodes) when the document is laid out any other way."""
    sha = envelope.get("sha256")
    if not isinstance(sha, str):
        return False
    tail = json.dumps(
        {k: envelope.get(k) for k in ("format_version", "kind", "sha256")}, separators=(",", ":")
    )
    tail_bytes = b"," + tail[1:].encode()
    text = raw.rstrip(b"\n")
    head = b'{"body":'
    if not (text.startswith(head) and text.endswith(tail_bytes)):
        return False
    return sha256_hex(text[len(head) : len(text) - len(tail_bytes)]) == sha


def _decode_body(envelope: Any, key: str, raw: bytes = b"") -> HistorySegment:
    """Verify the envelope (version, kind, checksum) and build the segment with explicit type checks."""
    if not isinstance(envelope, dict):
        raise ManifestError(f"{KIND} document {key!r} is not a JSON object")
    version = envelope.get("format_version")
    if type(version) is not int or version < 1:
        raise ManifestError(f"{KIND} document {key!r} has no valid format_version")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatVersion(
            f"{KIND} document {key!r} has format_version {version}, newer than this Epochal supports "
            f"({FORMAT_VERSION}): upgrade Epochal to read it"
        )
    if envelope.get("kind") != KIND:
        raise ManifestError(f"document {key!r} is a {envelope.get('kind')!r} document, expected {KIND!r}")
    body = envelope.get("body")
    if not _raw_body_matches(raw, envelope) and sha256_hex(canonical_json(body)) != envelope.get("sha256"):
        raise ManifestError(f"{KIND} document {key!r} fails its checksum (torn or altered)")
    try:
        if not isinstance(body, dict):
            raise TypeError("the body is not an object")
        job, first, last, rows = body["job_id"], body["first_seq"], body["last_seq"], body["rows"]
        open_ids = body.get("open_ids", [])
        if not isinstance(job, str) or type(first) is not int or type(last) is not int:
            raise TypeError("job_id/first_seq/last_seq have the wrong types")
        if not isinstance(open_ids, list) or any(type(i) is not int for i in open_ids):
            raise TypeError("open_ids is not a list of integers")
        if body.get("columns") != [*_COLUMNS, "listing"]:
            raise ValueError(f"columns {body.get('columns')!r} are not {[*_COLUMNS, 'listing']!r}")
        width = len(_ALLOWED)
        if not isinstance(rows, list) or {(type(r), len(r)) for r in rows} - {(list, width)}:
            raise TypeError(f"rows are not lists of {width} values")
        for k, allowed in enumerate(_ALLOWED):
            if {type(r[k]) for r in rows} - allowed:
                name = _COLUMNS[k] if k < len(_COLUMNS) else "listing"
                raise TypeError(f"column {name!r} has a value of the wrong type")
        archived = tuple(ArchivedRow(CheckpointRow(*r[:-1]), r[-1]) for r in rows)
        return HistorySegment(job, first, last, archived, tuple(open_ids))
    except (TypeError, ValueError, KeyError) as exc:
        raise ManifestError(f"{KIND} document {key!r} has an invalid body ({exc})") from None


def decode_segment(data: bytes, ref: SegmentRef, job_id: str) -> HistorySegment:
    """Decode and check a segment against its key; ManifestError when it cannot be trusted."""
    try:
        envelope = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(
            f"{KIND} document {ref.key!r} is not valid JSON (truncated or corrupt: {exc})"
        ) from None
    segment = _decode_body(envelope, ref.key, data)
    ids = [r.row.checkpoint_id for r in segment.rows]
    if (segment.job_id, segment.first_seq, segment.last_seq) != (job_id, ref.first_seq, ref.last_seq) or (
        ids != sorted(set(ids))
    ):
        raise ManifestError(f"history segment {ref.key!r} does not match its key; it is ignored")
    return segment


def list_segments(store: ObjectStore, layout: JobLayout) -> list[SegmentRef]:
    """Every segment key, by first write ascending and the widest first."""
    refs = []
    for info in store.list(layout.history_prefix):
        m = _NAME.fullmatch(info.key[len(layout.history_prefix) :])
        if m and int(m.group(1)) <= int(m.group(2)):
            refs.append(SegmentRef(info.key, info.version, int(m.group(1)), int(m.group(2))))
    return sorted(refs, key=lambda r: (r.first_seq, -r.last_seq))


SegmentCache = dict[tuple[str, str], "HistorySegment | None"]


def _read(store: ObjectStore, layout: JobLayout, ref: SegmentRef) -> HistorySegment | None:
    try:
        return decode_segment(store.get(ref.key).data, ref, layout.job_id)
    except ObjectNotFound:
        return None  # merged away by a concurrent writer; the merged segment is listed next time
    except ManifestError as exc:
        log.warning("checkpoint history of job %s: %s", layout.job_id, exc)
        return None


def load_archive(
    store: ObjectStore, layout: JobLayout, *, cache: SegmentCache | None = None, workers: int = 8
) -> ArchiveView:
    """Merge the archive: for each range of writes the widest segment that decodes, rows of later
    writes replacing earlier ones. ``cache`` maps (key, version) to decoded segments (immutable)."""
    cache = {} if cache is None else cache
    refs = list_segments(store, layout)
    optimistic, covered = [], 0
    for ref in refs:  # the cover if every segment decodes: read these in parallel
        if ref.last_seq > covered:
            optimistic.append(ref)
            covered = ref.last_seq
    missing = [r for r in optimistic if (r.key, r.version) not in cache]
    reads = len(missing)
    local = store.uri.startswith(("file:", "memory:"))  # threads only help with network round trips
    if len(missing) > 1 and workers > 1 and not local:
        with ThreadPoolExecutor(max_workers=min(workers, len(missing))) as pool:
            for ref, seg in zip(missing, pool.map(lambda r: _read(store, layout, r), missing)):
                cache[(ref.key, ref.version)] = seg
    else:
        for ref in missing:
            cache[(ref.key, ref.version)] = _read(store, layout, ref)
    cover: list[tuple[SegmentRef, HistorySegment]] = []
    corrupt: list[str] = []
    covered = 0
    for ref in refs:
        if ref.last_seq <= covered:
            continue
        if (ref.key, ref.version) not in cache:  # a narrower segment under a corrupt wider one
            reads += 1
            cache[(ref.key, ref.version)] = _read(store, layout, ref)
        segment = cache[(ref.key, ref.version)]
        if segment is None:
            corrupt.append(ref.key)
            continue
        cover.append((ref, segment))
        covered = ref.last_seq
    rows: dict[int, ArchivedRow] = {}
    open_ids: frozenset[int] = frozenset()
    for _, seg in cover:
        rows.update((r.row.checkpoint_id, r) for r in seg.rows)
        open_ids = frozenset(seg.open_ids)
    return ArchiveView(
        rows=rows,
        open_ids=frozenset(i for i in open_ids if i not in rows),
        cover=tuple(cover),
        listed=tuple(refs),
        corrupt=tuple(corrupt),
        reads=reads,
    )


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    written: tuple[str, ...] = ()  # segment keys created
    rows: int = 0  # rows archived by this run
    merged: str = ""  # the merged segment, if this run compacted
    deleted: int = 0  # segments deleted after the merge
    documents_read: int = 0


def archive_history(
    store: ObjectStore, job_id: str, *, attempts: int = 3, cache: SegmentCache | None = None
) -> ArchiveReport:
    """Archive the row of every decided checkpoint whose folder is present and whose row is not in
    the archive yet (or changed since), then merge the tail if it is long enough.

    Reads the listing of ``checkpoints/`` (retention lists it anyway), the archive's segments (about
    ``archived / SEAL_ROWS + FANOUT``; ``cache`` keeps them across calls in one process) and the
    documents of the folders it archives. Raises ``StoreError`` after ``attempts`` create-only
    conflicts or on a store failure; the retention step catches it (see the module invariants).
    """
    layout = JobLayout(job_id)
    cache = {} if cache is None else cache
    reads = 0
    for _ in range(max(1, attempts)):
        listed = {i: x for i, x in list_checkpoints(store, layout).items() if "_pending.json" in x.docs}
        view = load_archive(store, layout, cache=cache)
        reads += view.reads
        fresh: list[ArchivedRow] = []
        still_open: list[int] = []
        for i, item in listed.items():
            known = view.rows.get(i)
            if "_decision.json" not in item.docs:
                still_open.append(i)
                continue
            if known is not None and known.token == item.token():
                continue
            row, n = checkpoint_row(store, layout, i, item)
            reads += n
            if row.status in FINAL:
                fresh.append(ArchivedRow.of(row, item))
            else:
                still_open.append(i)
        if not fresh and frozenset(still_open) == view.open_ids:
            return ArchiveReport(documents_read=reads)
        chunks = [fresh[k : k + SEAL_ROWS] for k in range(0, len(fresh), SEAL_ROWS)] or [[]]
        seq = view.next_seq
        written: list[str] = []
        try:
            for chunk in chunks:
                segment = HistorySegment(job_id, seq, seq, tuple(chunk), tuple(still_open))
                written.append(_put(store, layout, segment))
                seq += 1
        except ObjectAlreadyExists:
            continue  # another writer took this write number: re-read its rows and retry
        merged, deleted = _compact(store, layout, cache)
        return ArchiveReport(tuple(written), len(fresh), merged, deleted, reads)
    raise ObjectAlreadyExists(
        f"checkpoint history of job {job_id}: {attempts} create-only conflicts in a row with other "
        "writers; the next cycle archives again"
    )


def _put(store: ObjectStore, layout: JobLayout, segment: HistorySegment) -> str:
    key = layout.history_segment(segment.first_seq, segment.last_seq)
    store.put_if_absent(key, encode_segment(segment))
    return key


def merge_rows(segments: Iterable[HistorySegment]) -> tuple[ArchivedRow, ...]:
    rows: dict[int, ArchivedRow] = {}
    for seg in segments:
        rows.update((r.row.checkpoint_id, r) for r in seg.rows)
    return tuple(rows[i] for i in sorted(rows))


def _compact(store: ObjectStore, layout: JobLayout, cache: SegmentCache) -> tuple[str, int]:
    """Merge the unsealed segments after the last sealed one when there are ``FANOUT`` of them.

    Best effort: a conflict leaves things for the next run. Returns (merged key or "", deleted)."""
    view = load_archive(store, layout, cache=cache)
    sealed_at = max((k for k, (_, seg) in enumerate(view.cover) if seg.sealed), default=-1)
    tail = view.cover[sealed_at + 1 :]
    if len(tail) < FANOUT:
        return "", 0
    merged = HistorySegment(
        layout.job_id,
        tail[0][0].first_seq,
        tail[-1][0].last_seq,
        merge_rows(seg for _, seg in tail),
        tail[-1][1].open_ids,
    )
    try:
        key = _put(store, layout, merged)
    except ObjectAlreadyExists:
        return "", 0
    deleted = 0
    for ref in view.listed:
        if ref.key != key and merged.first_seq <= ref.first_seq and ref.last_seq <= merged.last_seq:
            try:
                store.delete(ref.key)
                deleted += 1
            except StoreError as exc:
                log.warning("checkpoint history: could not delete merged segment %s: %s", ref.key, exc)
    return key, deleted
