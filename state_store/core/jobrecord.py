"""The job record ``_job.json``: created once, then changed only by compare-and-swap.

It is the job's single point of linearization (Flink keeps the same facts in its HA store): the
generation, the lease and its fencing token, the chain head and the effective parallelism live in
one document, so one CAS can check a holder's token and move the chain at the same instant.

Every change goes through :meth:`JobRecords.update` (read, compute, CAS, retry on a lost race);
every change made on behalf of a lease holder goes through :meth:`JobRecords.fenced_update`, which
refuses -- with :class:`state_store.core.lease.LeaseLostError` -- when the record's lease no longer
carries the caller's token. Because the check and the write are one CAS, a holder whose lease was
broken or taken over between its check and its write cannot slip a change in.
"""

from __future__ import annotations

from collections.abc import Callable

from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.layout import JobLayout
from state_store.core.lease import check_token
from state_store.core.manifests import JobRecord
from state_store.core.ports import ObjectAlreadyExists, ObjectNotFound, ObjectStore, VersionMismatch

CAS_RETRIES = 64


class JobRecordContention(RuntimeError):
    """The job record kept changing under a compare-and-swap (``CAS_RETRIES`` lost races)."""


Mutation = Callable[[JobRecord], JobRecord]


class JobRecords:
    """Reads and compare-and-swaps one job's ``_job.json``."""

    def __init__(self, store: ObjectStore, job_id: str) -> None:
        self.store = store
        self.layout = JobLayout(job_id)

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    def read(self) -> JobRecord | None:
        """The record, or None for a job that never ran (ManifestError if it is damaged)."""
        try:
            return documents.read_optional(self.store, self.layout.job_record, JobRecord)
        except ManifestError as exc:
            raise ManifestError(
                f"{str(exc).split('; ')[0]}: the job record holds the job's lease and latest checkpoint; "
                f"restore {self.layout.job_record} from a backup, or delete it: the job then continues "
                "from its newest checkpoint that verifies"
            ) from None

    def ensure(self, max_parallelism: int, now_ms: int) -> JobRecord:
        """The record, created if missing: generation 1, chained, no head for a new job; for a job
        that already has completed checkpoints (its record was lost), a record without a chain
        (``chained`` false) at their newest generation, so recovery takes the newest checkpoint that
        verifies -- never a silent restart from the beginning of the input."""
        record = self.read()
        if record is not None:
            return record
        generation, restored_from = self._newest_generation()
        fresh = JobRecord(
            self.job_id,
            generation or 1,
            max_parallelism,
            created_ms=now_ms,
            restored_from=restored_from,
            # a lost record's holders had small tokens: start far above any of them (zombies of
            # the lost record are fenced), and keep tokens growing from there
            fencing_token=0 if generation is None else now_ms,
            chained=generation is None,
        )
        try:
            documents.create(self.store, self.layout.job_record, fresh)
        except ObjectAlreadyExists:
            pass
        return documents.read(self.store, self.layout.job_record, JobRecord)

    def _newest_generation(self) -> tuple[int | None, int]:
        """The newest generation among the job's completed checkpoints (None: it has none) and the
        restore import that started it (0: none). A restore's import carries the generation before
        the one its commit started; savepoints do not count (their epoch continued nothing)."""
        from state_store.core.manifests import CompletedMetadata

        newest: tuple[int, int] | None = None  # (generation, import id or 0)
        for info in self.store.list(self.layout.checkpoints_prefix):
            if not info.key.endswith("/_metadata.json"):
                continue
            try:
                meta = documents.read(self.store, info.key, CompletedMetadata)
            except (ManifestError, ObjectNotFound):
                continue
            if meta.properties.savepoint:
                continue
            barrier = meta.barrier
            imported = barrier.is_import and barrier.base is None
            found = (meta.generation + 1, meta.checkpoint_id) if imported else (meta.generation, 0)
            if newest is None or found[0] > newest[0] or (found[0] == newest[0] and found[1]):
                newest = found
        return (None, 0) if newest is None else newest

    def update(self, mutate: Mutation) -> JobRecord:
        """Apply ``mutate`` to the current record by CAS, re-reading after every lost race.

        ``mutate`` may raise to refuse the change (nothing is written); returning the record
        unchanged still writes it back, which proves by CAS that nobody changed it in between."""
        for _ in range(CAS_RETRIES):
            try:
                current, raw = documents.read_versioned(self.store, self.layout.job_record, JobRecord)
            except ObjectNotFound:
                raise ObjectNotFound(
                    f"job {self.job_id} has no job record ({self.layout.job_record}) in "
                    f"{self.store.uri}: it never ran here; check --job and --store"
                ) from None
            updated = mutate(current)
            try:
                self.store.put_if_match(self.layout.job_record, documents.encode(updated), raw.version)
                return updated
            except VersionMismatch:
                continue
        raise JobRecordContention(
            f"job {self.job_id}: the job record kept changing under {CAS_RETRIES} compare-and-swaps; "
            "another actor is writing it in a loop: stop it and retry"
        )

    def fenced_update(self, token: int | None, mutate: Mutation) -> JobRecord:
        """:meth:`update`, refused unless the caller's lease is still the record's (see module
        docstring). ``token=None``: the caller holds no lease, and the change is refused while
        anybody holds one (tests and tools that act on an idle job)."""

        def fenced(current: JobRecord) -> JobRecord:
            check_token(current, token)
            return mutate(current)

        return self.update(fenced)


__all__ = ["CAS_RETRIES", "JobRecordContention", "JobRecords", "Mutation"]
