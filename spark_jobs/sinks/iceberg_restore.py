"""The restore side of an Iceberg sink: the fence, the rewind (``retract_after``) and what it withdrew.

Both are catalog commits of their own (``iceberg_publish``), made on a freshly read table and
decided again when a concurrent commit wins the catalog's compare-and-swap, and idempotent:

* ``fence(g)``: the job-store fence document first (it covers a table that does not exist yet),
  then, if the table exists and its fence property is below *g*, a commit of an empty snapshot
  (kind ``fence``) setting ``epochal/<job>/<uid>/fence`` to *g*. The snapshot moves branch main, so
  a zombie's data commit built before it fails in the catalog and, decided again, is refused;
* ``retract_after(a, g, ...)``: nothing with ``on_rewind="keep"``; with ``"overwrite"`` the plan of
  ``iceberg_rewind`` and one overwrite commit (kind ``rewind``, the withdrawn ids, the restored
  snapshot) setting the rewind property to *g*: a second call finds it and returns the same ids.
"""

from __future__ import annotations

import logging
from typing import Any

from spark_jobs.sinks.commit_log import CommitLog
from spark_jobs.sinks.delta_ledger import CommitKind, SinkCommitInfo
from spark_jobs.sinks.iceberg_catalog import IcebergTableRef
from spark_jobs.sinks.iceberg_ledger import SinkKeys, newest_first, read_state
from spark_jobs.sinks.iceberg_publish import fence_transaction, retryable, rewind_transaction
from spark_jobs.sinks.iceberg_rewind import plan_rewind
from state_store.core.twophase import SinkCommitError

log = logging.getLogger(__name__)


def commit_or_retry(ref: IcebergTableRef, tx: Any, action: str, attempt: int, attempts: int) -> bool:
    """Commit ``tx``; False if a concurrent commit won (decide again), SinkCommitError on the last
    attempt."""
    try:
        with ref.reaching(action):
            tx.commit_transaction()
        return True
    except retryable() as exc:
        if attempt + 1 == attempts:
            raise SinkCommitError(
                f"Iceberg table {ref.name}: {action} lost to concurrent commits {attempts} times "
                f"(last: {exc}); retry it"
            ) from exc
        log.info("Iceberg table %s: %s decided again (%s)", ref.name, action, exc)
        return False


class Restores:
    """Fence and rewind one sink's table (module docstring)."""

    def __init__(
        self,
        ref: IcebergTableRef,
        keys: SinkKeys,
        fences: CommitLog,
        on_rewind: str,
        attempts: int,
    ) -> None:
        self.ref = ref
        self.keys = keys
        self.fences = fences
        self.on_rewind = on_rewind
        self.attempts = attempts
        self.load = ref.load

    @property
    def name(self) -> str:
        return self.ref.name

    def fence(self, generation: int) -> None:
        self.fences.fence(generation)
        for attempt in range(self.attempts):
            table = self.load()
            if table is None or read_state(table, self.keys, self.name).fenced >= generation:
                return
            info = SinkCommitInfo(CommitKind.FENCE, self.keys.job_id, self.keys.uid, generation)
            tx = fence_transaction(table, info, self.keys)
            if commit_or_retry(self.ref, tx, f"fencing generation {generation}", attempt, self.attempts):
                return

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, *, before: int | None = None
    ) -> tuple[int, ...]:
        if self.on_rewind != "overwrite":
            log.info(
                "Iceberg table %s keeps the rows committed after checkpoint %s (%s)",
                self.name,
                checkpoint_id,
                reason,
            )
            return ()
        for attempt in range(self.attempts):
            table = self.load()
            if table is None:
                return ()
            snapshots = list(newest_first(table, self.keys))
            plan = plan_rewind(
                snapshots, after=checkpoint_id, generation=generation, before=before, table=self.name
            )
            if plan.done or not plan.withdrawn:
                return plan.withdrawn
            state = read_state(table, self.keys, self.name)
            info = SinkCommitInfo(
                CommitKind.REWIND,
                self.keys.job_id,
                self.keys.uid,
                generation,
                checkpoint_id,
                withdrawn=plan.withdrawn,
                restored_version=plan.target,
            )
            tx = rewind_transaction(table, plan, info, self.keys, max(generation, state.fenced), self.name)
            action = f"rewinding to checkpoint {checkpoint_id}"
            if commit_or_retry(self.ref, tx, action, attempt, self.attempts):
                log.warning(
                    "Iceberg table %s: withdrew checkpoints %s (%s)", self.name, list(plan.withdrawn), reason
                )
                return plan.withdrawn
        return ()

    def retracted_ids(self) -> frozenset[int]:
        if self.on_rewind != "overwrite":
            return frozenset()
        table = self.load()
        if table is None:
            return frozenset()
        return frozenset(
            n
            for s in newest_first(table, self.keys)
            if s.info is not None and s.info.kind is CommitKind.REWIND
            for n in s.info.withdrawn
        )
