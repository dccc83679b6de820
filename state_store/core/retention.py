"""Retention planning (pure): which files of a job to delete, given what must be kept.

Kept, always:
  * the newest ``retained_count`` completed checkpoints, pinned checkpoints, the one ``LATEST``
    names, and completed savepoints: their whole folder and every file they reference
    (including ``shared/`` files of incremental checkpoints);
  * in-flight (undecided) checkpoints: their whole folder and every file their acks reference;
  * checkpoints whose documents could not be read (``status="unreadable"``): nothing is deleted
    on bad input;
  * everything outside ``checkpoints/`` and ``shared/`` (job record, LATEST, savepoints, sinks);
  * the ``_pending.json`` of the highest allocated id (the id high-water mark: ids are never reused).
Deleted:
  * completed checkpoints that fell out of retention (not referenced elsewhere);
  * aborted checkpoints and folders without a trigger record, once older than ``grace_ms``;
  * ``shared/`` files referenced by no kept checkpoint, once older than ``grace_ms``.

Order inside a discarded folder: ``_pending.json`` first (so a crash mid-retention can never
make a coordinator roll the checkpoint forward), then data, acks and ``_decision.json``, then
``_metadata.json`` (a half-deleted checkpoint fails verification), and ``_quarantined.json`` last
(a half-deleted checkpoint whose state lives in ``shared/`` may still verify: it stays marked).
"""

from __future__ import annotations

from dataclasses import dataclass

from state_store.core.ports import ObjectInfo

_LAST = {"_pending.json": 0, "_decision.json": 2, "_metadata.json": 3, "_quarantined.json": 4}


@dataclass(frozen=True, slots=True)
class CheckpointFacts:
    """What the planner needs to know about checkpoint n.

    ``status`` is one of ``completed``, ``aborted``, ``in_flight``, ``orphan`` (files but no trigger
    record) or ``unreadable``; ``references`` are the keys its metadata (or in-flight acks) name.
    """

    checkpoint_id: int
    status: str
    references: frozenset[str] = frozenset()
    is_savepoint: bool = False
    quarantined: bool = False
    decided_ms: int = 0


@dataclass(frozen=True, slots=True)
class RetentionInputs:
    job_root: str
    objects: tuple[ObjectInfo, ...]
    checkpoints: tuple[CheckpointFacts, ...]
    retained_count: int
    now_ms: int
    grace_ms: int
    pinned: frozenset[int] = frozenset()
    pointer: int | None = None


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    retained: tuple[int, ...]
    discarded: tuple[int, ...]
    delete: tuple[str, ...]
    protected: frozenset[str]


def _checkpoint_dir(job_root: str, checkpoint_id: int) -> str:
    return f"{job_root}checkpoints/chk-{checkpoint_id:010d}/"


def plan_retention(inputs: RetentionInputs) -> RetentionPlan:
    """Compute the plan (see module docstring). Pure: the same inputs give the same plan."""
    facts = {f.checkpoint_id: f for f in inputs.checkpoints}
    completed = sorted(
        (f.checkpoint_id for f in inputs.checkpoints if f.status == "completed" and not f.is_savepoint),
        reverse=True,
    )
    fresh = [i for i in completed if not facts[i].quarantined][: inputs.retained_count]
    keep_ids = set(fresh) | (set(inputs.pinned) & set(facts))
    if inputs.pointer is not None and inputs.pointer in facts:
        keep_ids.add(inputs.pointer)
    keep_ids |= {f.checkpoint_id for f in inputs.checkpoints if f.status == "completed" and f.is_savepoint}
    keep_ids |= {f.checkpoint_id for f in inputs.checkpoints if f.status in ("in_flight", "unreadable")}

    protected: set[str] = set()
    dirs = {i: _checkpoint_dir(inputs.job_root, i) for i in facts}
    for i in keep_ids:
        protected |= facts[i].references
    high_water = max((i for i, f in facts.items() if f.status != "orphan"), default=None)
    if high_water is not None:
        protected.add(dirs[high_water] + "_pending.json")

    expired = inputs.now_ms - inputs.grace_ms
    discard_ids = sorted(
        i
        for i, f in facts.items()
        if i not in keep_ids
        and (f.status == "completed" or (f.status in ("aborted", "orphan") and f.decided_ms <= expired))
    )
    shared_prefix = inputs.job_root + "shared/"
    by_dir: dict[int, list[ObjectInfo]] = {i: [] for i in discard_ids}
    doomed_shared: list[str] = []
    for obj in inputs.objects:
        if obj.key in protected:
            continue
        if obj.key.startswith(shared_prefix):
            if obj.modified_ms <= expired:
                doomed_shared.append(obj.key)
            continue
        for i in discard_ids:
            if obj.key.startswith(dirs[i]):
                if facts[i].status == "orphan" and obj.modified_ms > expired:
                    break
                by_dir[i].append(obj)
                break

    delete: list[str] = []
    for i in discard_ids:
        names = sorted(by_dir[i], key=lambda o: (_LAST.get(o.key.rsplit("/", 1)[1], 1), o.key))
        delete.extend(o.key for o in names)
    delete.extend(sorted(doomed_shared))
    return RetentionPlan(
        retained=tuple(sorted(keep_ids & set(completed) | (keep_ids & set(inputs.pinned)))),
        discarded=tuple(i for i in discard_ids if by_dir[i]),
        delete=tuple(delete),
        protected=frozenset(protected),
    )
