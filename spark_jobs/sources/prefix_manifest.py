"""The prefix source's durable manifest: which landing-zone files hold which offsets of a partition.

Layout (in the job's store, beside its checkpoints; retention never touches it)::

    <job_id>/sources/<uid>/_source.json                  format, prefix, partitioning (create-only)
    <job_id>/sources/<uid>/manifest/<partition>/<seq:010d>.json   chunk seq: files admitted by one
                                                          discovery round (create-only, immutable)
    <job_id>/sources/<uid>/heads/<partition>.json         the partition's head (compare-and-swap)

A **chunk** is the commit point of an admission: it lists files with their offset ranges
``[base, base + count)``, and chunk *s* starts where chunk *s - 1* ends, so the offsets of a
partition are the cumulative record counts along its chunks. Chunks are never rewritten: the same
offsets always name the same file rows, which is what makes a replay exact.

The **head** is a cache of the last chunk (``seq``, ``end``) plus the discovery state that must not
live in memory between epochs: the files admitted recently (``seen``), a compacted *floor* standing
for the files admitted long ago, and the files observed but not admitted yet (``pending``, the
half-written rule). A crash between writing chunk *s* and moving the head leaves the head behind;
:meth:`Manifest.load_head` rolls it forward by probing chunk ``seq + 1`` (a chunk exists ⇒ it is
committed), so the head never has to be right, only never ahead.

Reading ``[start, end)`` walks the chunks back from the head to the one holding ``start``: the
objects read per epoch are the chunks since the epoch's start position, not the partition's
history.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from spark_jobs.sources.errors import OffsetOutOfRangeError
from state_store.core.codec import decode_document, encode_document
from state_store.core.ports import (
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStore,
    VersionMismatch,
)

SOURCE_KIND, HEAD_KIND, CHUNK_KIND = "prefix_source", "prefix_head", "prefix_chunk"
_CHUNK_CACHE = 64


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """What the offsets depend on: refusing to reopen the manifest with other values."""

    uid: str
    prefix: str
    format: str
    partitioning: str
    """``hash:<n>`` (a file goes to ``p<stable_hash(path) % n>``) or ``folder``."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One admitted file: records ``[base, base + count)`` of its partition.

    ``path`` is relative to the landing prefix; ``version`` and ``sha256`` fingerprint the content
    that was counted (a later read must find the same bytes). ``unreadable``: the file could not be
    parsed and was admitted as one dead-lettered offset (``on_unreadable_file="dead_letter"``).
    """

    path: str
    base: int
    count: int
    size: int
    version: str
    modified_ms: int
    sha256: str
    unreadable: str = ""

    @property
    def end(self) -> int:
        return self.base + self.count


@dataclass(frozen=True, slots=True)
class Chunk:
    """Files admitted to one partition by one discovery round; offsets ``[base, end)``."""

    partition: str
    seq: int
    base: int
    end: int
    files: tuple[FileEntry, ...]


@dataclass(frozen=True, slots=True)
class Seen:
    """An admitted file still tracked by name (not yet covered by the floor)."""

    path: str
    modified_ms: int


@dataclass(frozen=True, slots=True)
class Pending:
    """A file observed by a listing and not admitted yet (settling, or over the epoch's cap)."""

    path: str
    size: int
    version: str
    modified_ms: int


@dataclass(frozen=True, slots=True)
class Head:
    """A partition's last chunk (``seq`` 0: none) and its discovery state.

    A listed file is *known* (admitted before) iff its path is in ``seen``, or ``path <= floor_path``
    and ``modified_ms <= floor_ms`` (the floor; ``floor_ms`` None: no floor yet).
    """

    partition: str
    seq: int = 0
    end: int = 0
    files: int = 0
    floor_path: str = ""
    floor_ms: int | None = None
    seen: tuple[Seen, ...] = ()
    pending: tuple[Pending, ...] = ()

    def with_chunk(self, chunk: Chunk) -> Head:
        """The head after ``chunk`` (which must be the next one)."""
        if chunk.seq != self.seq + 1 or chunk.base != self.end:
            raise ValueError(
                f"chunk {chunk.seq} of partition {self.partition!r} starts at {chunk.base} but the head "
                f"is at chunk {self.seq} ending at {self.end}"
            )
        admitted = {f.path for f in chunk.files}
        seen = {s.path: s for s in self.seen}
        seen.update((f.path, Seen(f.path, f.modified_ms)) for f in chunk.files)
        return replace(
            self,
            seq=chunk.seq,
            end=chunk.end,
            files=self.files + len(chunk.files),
            seen=tuple(sorted(seen.values(), key=lambda s: s.path)),
            pending=tuple(p for p in self.pending if p.path not in admitted),
        )


class Conflict(Exception):
    """Another writer created the chunk or moved the head first: re-read and redo the round."""


@dataclass(frozen=True, slots=True)
class ManifestLayout:
    """Object keys of one source's manifest (module docstring)."""

    job_id: str
    uid: str

    @property
    def root(self) -> str:
        return f"{self.job_id}/sources/{self.uid}/"

    @property
    def source(self) -> str:
        return f"{self.root}_source.json"

    @property
    def heads(self) -> str:
        return f"{self.root}heads/"

    def head(self, partition: str) -> str:
        return f"{self.heads}{partition}.json"

    def chunk(self, partition: str, seq: int) -> str:
        return f"{self.root}manifest/{partition}/{seq:010d}.json"


class Manifest:
    """Reads and appends the manifest of one source in ``store`` (module docstring)."""

    def __init__(self, store: ObjectStore, layout: ManifestLayout) -> None:
        self.store = store
        self.layout = layout
        self._chunks: OrderedDict[str, Chunk] = OrderedDict()
        self.reads = 0
        """Objects fetched so far (heads and chunks not served from the cache): for tests and tools."""
        self.bytes_read = 0

    # -- the source record -------------------------------------------------------------------
    def source_record(self, wanted: SourceRecord) -> SourceRecord:
        """Create the source record if missing and return the stored one (the caller compares)."""
        key = self.layout.source
        try:
            self.store.put_if_absent(key, encode_document(SOURCE_KIND, wanted))
            return wanted
        except ObjectAlreadyExists:
            return decode_document(self.store.get(key).data, SOURCE_KIND, SourceRecord, key=key)

    def partitions(self) -> list[str]:
        """The partitions that have a head, sorted."""
        prefix = self.layout.heads
        names = (info.key[len(prefix) :] for info in self.store.list(prefix))
        return sorted(name[: -len(".json")] for name in names if name.endswith(".json") and "/" not in name)

    # -- heads -------------------------------------------------------------------------------
    def load_head(self, partition: str) -> tuple[Head, str | None, Head]:
        """``(head rolled forward, stored version or None, head as stored)``."""
        key = self.layout.head(partition)
        try:
            raw = self.store.get(key)
        except ObjectNotFound:
            stored, version = Head(partition), None
        else:
            self._count(len(raw.data))
            stored, version = decode_document(raw.data, HEAD_KIND, Head, key=key), raw.version
        head = stored
        while (chunk := self.chunk(partition, head.seq + 1, missing_ok=True)) is not None:
            head = head.with_chunk(chunk)
        return head, version, stored

    def commit(self, chunk: Chunk | None, head: Head, version: str | None) -> None:
        """Create ``chunk`` (the commit point), then move the head from ``version`` to ``head``.

        Raises :class:`Conflict` if another writer created the chunk (with other files) or moved
        the head since it was read."""
        if chunk is not None:
            try:
                self.store.put_if_absent(
                    self.layout.chunk(chunk.partition, chunk.seq), encode_document(CHUNK_KIND, chunk)
                )
            except ObjectAlreadyExists:
                raise Conflict(f"chunk {chunk.seq} of partition {chunk.partition!r}") from None
            self._remember(self.layout.chunk(chunk.partition, chunk.seq), chunk)
        data = encode_document(HEAD_KIND, head)
        key = self.layout.head(head.partition)
        try:
            if version is None:
                self.store.put_if_absent(key, data)
            else:
                self.store.put_if_match(key, data, version)
        except (ObjectAlreadyExists, VersionMismatch):
            if chunk is None:
                raise Conflict(f"head of partition {head.partition!r}") from None
            # the chunk is committed; a newer head (or the next round's roll-forward) covers it

    # -- chunks ------------------------------------------------------------------------------
    def chunk(self, partition: str, seq: int, *, missing_ok: bool = False) -> Chunk | None:
        key = self.layout.chunk(partition, seq)
        cached = self._chunks.get(key)
        if cached is not None:
            self._chunks.move_to_end(key)
            return cached
        try:
            raw = self.store.get(key)
        except ObjectNotFound:
            if missing_ok:
                return None
            raise OffsetOutOfRangeError(
                f"manifest chunk {key!r} of partition {partition!r} is missing: the source's manifest "
                "was damaged or deleted; restore it from a backup, or start the source under a new uid"
            ) from None
        self._count(len(raw.data))
        chunk = decode_document(raw.data, CHUNK_KIND, Chunk, key=key)
        self._remember(key, chunk)
        return chunk

    def covering(self, head: Head, start: int, end: int) -> list[FileEntry]:
        """Files with records in ``[start, end)`` (end exclusive), in offset order."""
        if start == end:
            return []
        if end > head.end:
            raise OffsetOutOfRangeError(
                f"cannot read partition {head.partition!r} range [{start}, {end}): the manifest ends at "
                f"offset {head.end} (exclusive); plan epochs from end_offsets()"
            )
        found: list[FileEntry] = []
        seq = head.seq
        while seq > 0:
            chunk = self.chunk(head.partition, seq)
            assert chunk is not None
            found.extend(f for f in reversed(chunk.files) if f.count and f.base < end and f.end > start)
            if chunk.base <= start:
                break
            seq -= 1
        return found[::-1]

    def _remember(self, key: str, chunk: Chunk) -> None:
        self._chunks[key] = chunk
        while len(self._chunks) > _CHUNK_CACHE:
            self._chunks.popitem(last=False)

    def _count(self, size: int) -> None:
        self.reads += 1
        self.bytes_read += size
