"""The audit of a job's stored checkpoints (``epochal validate``, the ``epochal_maintenance`` DAG).

Completion no longer reads state files back (DESIGN.md section 10): it checks that every file is
present with its size and takes the checksum its writer computed. Bytes that change *after* they
were written and verified -- disk or bucket corruption, a bad copy, a hand edit -- are found by this
audit, or at the latest by the restore that reads them. :func:`audit_checkpoints` checks every
completed checkpoint still in storage (the retained ones, pinned ones and savepoints' checkpoints):

* its ``_metadata.json`` verifies (envelope checksum, job and id);
* every file it references is present with its recorded size (folder listings, nothing read);
* ``deep``: every file is read back and its bytes are checked against the checksum its writer
  recorded (BLAKE3; SHA-256 for files written before format 2). A file referenced by several
  checkpoints (incremental ``shared/`` files) is read once.

Every finding names the file, the checkpoints that reference it and the remedy: whether the job's
latest checkpoint (its chain head, the next epoch's restore base) is affected, and the newest
checkpoint that passed, to resume from. The audit only reads (it holds no lease and changes
nothing); a checkpoint that retention removed while the audit ran is left out of the findings.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.completed import check_handles, completed_ids, quarantined_ids
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, JobRecord, LatestPointer, StateHandle
from state_store.core.ports import ObjectNotFound, ObjectStore


@dataclass(frozen=True, slots=True)
class AuditFinding:
    """One damaged file (or metadata document) and what to do about it."""

    key: str
    problem: str
    checkpoints: tuple[int, ...]
    remedy: str

    def line(self) -> str:
        ids = ", ".join(map(str, self.checkpoints))
        which = "checkpoint" if len(self.checkpoints) == 1 else "checkpoints"
        return f"{self.problem} (referenced by {which} {ids}): {self.remedy}"


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What :func:`audit_checkpoints` checked and found."""

    job_id: str
    deep: bool
    checkpoints: tuple[int, ...]
    files: int
    bytes_checked: int
    latest: int | None
    findings: tuple[AuditFinding, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary_line(self) -> str:
        mode = "every byte read back" if self.deep else "presence and sizes"
        ids = ", ".join(map(str, self.checkpoints)) or "none"
        head = (
            f"job {self.job_id}: {len(self.checkpoints)} checkpoint(s) ({ids}), {self.files} file(s), "
            f"{self.bytes_checked} bytes ({mode})"
        )
        if self.ok:
            return f"{head}: all verify"
        return f"{head}: {len(self.findings)} damaged: {self.findings[0].line()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "deep": self.deep,
            "ok": self.ok,
            "checkpoints": list(self.checkpoints),
            "files": self.files,
            "bytes_checked": self.bytes_checked,
            "latest": self.latest,
            "findings": [
                {"key": f.key, "problem": f.problem, "checkpoints": list(f.checkpoints), "remedy": f.remedy}
                for f in self.findings
            ],
        }


def audit_checkpoints(
    store: ObjectStore,
    job_id: str,
    *,
    deep: bool,
    checkpoint_ids: list[int] | None = None,
    concurrency: int = 1,
) -> AuditReport:
    """Audit the completed checkpoints of ``job_id`` (module docstring): all of them, or only
    ``checkpoint_ids`` (an id without ``_metadata.json`` is then a finding). ``concurrency``: files
    checked at once (stores that declare ``max_concurrent_reads``)."""
    layout = JobLayout(job_id)
    listed = completed_ids(store, layout)
    wanted = listed if checkpoint_ids is None else sorted(set(checkpoint_ids))
    latest = _latest(store, layout, listed)
    metas: dict[int, CompletedMetadata] = {}
    damaged: list[tuple[str, str, tuple[int, ...]]] = []  # (key, problem, checkpoints)
    for n in wanted:
        key = layout.metadata(n)
        try:
            raw = store.get(key)
        except ObjectNotFound:
            if checkpoint_ids is not None:
                damaged.append((key, f"checkpoint {n} has no {key} (not completed, or removed)", (n,)))
            continue
        try:
            meta = documents.decode(raw.data, CompletedMetadata, key=key)
            if meta.checkpoint_id != n or meta.job_id != job_id:
                raise ManifestError(
                    f"metadata document {key!r} describes job {meta.job_id!r} checkpoint "
                    f"{meta.checkpoint_id}: it was moved or altered"
                )
        except ManifestError as exc:
            damaged.append((key, str(exc).split("; ")[0], (n,)))
            continue
        metas[n] = meta

    referenced: dict[tuple[str, int, str], list[int]] = collections.defaultdict(list)
    for n, meta in metas.items():
        for handle in meta.handles:
            ids = referenced[(handle.key, handle.size, handle.checksum)]
            if n not in ids:
                ids.append(n)
    handles = [StateHandle(key, size, checksum) for key, size, checksum in referenced]
    problems = check_handles(store, handles, deep=deep, concurrency=concurrency)
    for handle, problem in zip(handles, problems, strict=True):
        if problem is not None:
            damaged.append(
                (handle.key, problem, tuple(referenced[(handle.key, handle.size, handle.checksum)]))
            )

    # a checkpoint that retention removed meanwhile is no finding (its files went with it)
    gone = {n for _, _, ids in damaged for n in ids if n in metas and store.head(layout.metadata(n)) is None}
    damaged = [(k, p, tuple(n for n in ids if n not in gone)) for k, p, ids in damaged]
    damaged = [(k, p, ids) for k, p, ids in damaged if ids]
    bad = {n for _, _, ids in damaged for n in ids}
    quarantined = quarantined_ids(store, layout)
    good = [  # checkpoints to resume from, newest first
        n
        for n in sorted(metas, reverse=True)
        if n not in bad and n not in quarantined and n not in gone and not metas[n].properties.savepoint
    ]
    findings = tuple(
        AuditFinding(key, problem, ids, _remedy(layout, ids, latest, good)) for key, problem, ids in damaged
    )
    return AuditReport(
        job_id,
        deep,
        tuple(n for n in wanted if n in metas and n not in gone),
        len(handles),
        sum(h.size for h in handles),
        latest,
        findings,
    )


def _latest(store: ObjectStore, layout: JobLayout, listed: list[int]) -> int | None:
    """The job's latest completed checkpoint: the job record's chain head, else ``LATEST``, else
    the newest ``_metadata.json`` (the recovery rule of ``state_store.core.completed``)."""
    try:
        job = documents.read_optional(store, layout.job_record, JobRecord)
    except ManifestError:
        job = None
    if job is not None and job.chained:
        return job.head.checkpoint_id if job.head is not None else None
    try:
        pointer = documents.read_optional(store, layout.latest, LatestPointer)
    except ManifestError:
        pointer = None
    if pointer is not None:
        return pointer.checkpoint_id
    return listed[-1] if listed else None


def _remedy(layout: JobLayout, ids: tuple[int, ...], latest: int | None, good: list[int]) -> str:
    older = [n for n in good if latest is None or n < latest]
    if latest is not None and latest in ids:
        way_on = (
            f"or resume from checkpoint {older[0]}, the newest that passed, with `epochal restore --job "
            f"<job> --from {older[0]} --force` (it retracts the sink output committed since)"
            if older
            else "or restore the job from a savepoint (`epochal restore --job <job> --from <savepoint URI>`)"
        )
        return (
            f"checkpoint {latest} is job {layout.job_id}'s latest: its next epoch will refuse to restore "
            f"from it; put the file back from a backup or replica of the store, {way_on}"
        )
    return (
        "do not restore from these checkpoints (put the file back from a backup or replica of the store, "
        "or let retention remove them); "
        + (
            f"the job's latest checkpoint ({latest}) does not reference the file"
            if latest is not None
            else "the job has no latest checkpoint"
        )
    )
