"""Which listed files a discovery round admits, and the bounded state it keeps (pure functions).

One round (one ``end_offsets`` call) per partition::

    listing ──► classify ──► known (admitted before: skipped)
                        ├──► waiting    (too young, or not yet seen unchanged by two listings)
                        └──► candidates (settled) ──► select (oldest first, the epoch's caps) ──► admitted
    head' = head + chunk(admitted), pending = the unknown files not admitted, then compacted

Rules
-----
* **Known** -- a path in the head's ``seen``, or covered by its floor (``path <= floor_path`` and
  ``modified_ms <= floor_ms``). A known path listed with a newer ``modified_ms`` than when it was
  admitted was rewritten in place: reported (``rewritten``), never admitted again.
* **Settled** (the half-written rule) -- ``now - modified_ms >= settle_ms`` and, with
  ``confirm_listing``, the previous round saw the same ``(size, version)`` (a growing file changes
  both; the version is the ETag on S3, inode+mtime+size on disk).
* **Select** -- candidates of every partition in ``(modified_ms, path, partition)`` order, stopping at
  ``max_files`` files or before the file that would pass ``max_bytes`` (the first file is always
  taken, so one huge file cannot block the source). Deterministic: same listing, same admissions.
* **Compaction** (what bounds the head) -- seen entries older than ``max_file_age_ms`` (and the
  oldest ones beyond ``max_tracked_files``) are folded into the floor. The floor never covers a file
  that the current listing shows unadmitted (such a round skips compaction). ``pending`` keeps the
  ``max_tracked_files`` oldest unadmitted files; a younger one is confirmed again once it gets in. The price
  (as Spark's ``maxFileAge``): a file that first becomes visible *after* a compaction with a
  ``modified_ms`` at or below the floor and a path at or below ``floor_path`` is taken for an old one
  and never read. Producers that copy files with their old modification times must copy them under
  paths that sort after the floor, or within ``max_file_age_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from spark_jobs.sources.prefix_manifest import Chunk, Head, Pending


@dataclass(frozen=True, slots=True)
class Listed:
    """One listed landing-zone file; ``path`` is relative to the landing prefix."""

    path: str
    partition: str
    size: int
    version: str
    modified_ms: int


@dataclass(frozen=True, slots=True)
class Rules:
    """The admission and compaction settings of a source (see the module docstring)."""

    settle_ms: int
    confirm_listing: bool
    max_files: int | None
    max_bytes: int | None
    max_file_age_ms: int
    max_tracked_files: int


@dataclass(frozen=True, slots=True)
class View:
    """One partition as a round sees it."""

    head: Head
    candidates: tuple[Listed, ...] = ()
    waiting: tuple[Listed, ...] = ()
    rewritten: tuple[str, ...] = field(default=())


def is_known(head: Head, path: str, modified_ms: int, seen: Mapping[str, int]) -> bool:
    if path in seen:
        return True
    return head.floor_ms is not None and path <= head.floor_path and modified_ms <= head.floor_ms


def classify(head: Head, listed: Sequence[Listed], now_ms: int, rules: Rules) -> View:
    """Split one partition's listing into known, waiting and candidate files."""
    seen = {s.path: s.modified_ms for s in head.seen}
    pending = {p.path: p for p in head.pending}
    candidates: list[Listed] = []
    waiting: list[Listed] = []
    rewritten: list[str] = []
    for f in listed:
        if is_known(head, f.path, f.modified_ms, seen):
            if f.path in seen and f.modified_ms > seen[f.path]:
                rewritten.append(f.path)
            continue
        settled = now_ms - f.modified_ms >= rules.settle_ms
        before = pending.get(f.path)
        confirmed = not rules.confirm_listing or (
            before is not None and (before.size, before.version) == (f.size, f.version)
        )
        (candidates if settled and confirmed else waiting).append(f)
    return View(head, tuple(candidates), tuple(waiting), tuple(rewritten))


def select(views: Mapping[str, View], rules: Rules) -> dict[str, list[Listed]]:
    """The files this round admits, per partition, oldest first under the caps."""
    ordered = sorted(
        (f for view in views.values() for f in view.candidates),
        key=lambda f: (f.modified_ms, f.path, f.partition),
    )
    chosen: dict[str, list[Listed]] = {p: [] for p in views}
    size = 0
    for files, f in enumerate(ordered):
        if rules.max_files is not None and files >= rules.max_files:
            break
        if rules.max_bytes is not None and files and size + f.size > rules.max_bytes:
            break
        chosen[f.partition].append(f)
        size += f.size
    return chosen


def next_head(
    head: Head, chunk: Chunk | None, unadmitted: Sequence[Listed], now_ms: int, rules: Rules
) -> Head:
    """The head after this round: the chunk applied, ``pending`` = the unknown files not admitted
    (their current size and version, for the next round's confirmation), then compacted."""
    if chunk is not None:
        head = head.with_chunk(chunk)
    oldest = sorted(unadmitted, key=lambda f: (f.modified_ms, f.path))[: rules.max_tracked_files]
    pending = tuple(sorted((Pending(f.path, f.size, f.version, f.modified_ms) for f in oldest), key=_path))
    return compact(replace(head, pending=pending), unadmitted, now_ms, rules)


def compact(head: Head, unadmitted: Sequence[Listed], now_ms: int, rules: Rules) -> Head:
    """Fold old seen entries into the floor (module docstring); the floor only ever rises."""
    if not head.seen:
        return head
    cutoff = now_ms - rules.max_file_age_ms
    excess = len(head.seen) - rules.max_tracked_files
    if excess > 0:
        by_age = sorted(s.modified_ms for s in head.seen)
        cutoff = max(cutoff, by_age[excess - 1])
    if unadmitted:
        cutoff = min(cutoff, min(f.modified_ms for f in unadmitted) - 1)
    floor_ms = cutoff if head.floor_ms is None else max(head.floor_ms, cutoff)
    removed = [s for s in head.seen if s.modified_ms <= floor_ms]
    if not removed:
        return head
    floor_path = max(head.floor_path, max(s.path for s in removed))
    if any(f.path <= floor_path and f.modified_ms <= floor_ms for f in unadmitted):
        return head  # the new floor would hide a file not read yet: compact in a later round
    return replace(
        head,
        floor_ms=floor_ms,
        floor_path=floor_path,
        seen=tuple(s for s in head.seen if s.modified_ms > floor_ms),
    )


def _path(p: Pending) -> str:
    return p.path
