"""The restore side of a Delta sink: the fence, the rewind (``retract_after``) and what it withdrew.

Both are Delta commits of their own, retried when a concurrent commit of the sink wins the race
(delta-rs's conflict check on the shared application ids, see ``delta_ledger``), and idempotent:

* ``fence(g)``: the job-store fence document first (it covers a table that does not exist yet),
  then, if the table exists and its fence is below *g*, a commit carrying only the fence app
  transaction (version *g*) and ``commitInfo.epochal`` (kind ``fence``);
* ``retract_after(a, g, ...)``: nothing with ``on_rewind="keep"``; with ``"overwrite"`` the plan of
  ``delta_rewind`` and one RESTORE (or delete) commit carrying the rewind app transaction (version
  *g*: a second call finds it and returns the same ids), the fence and the data app transaction
  (unchanged version), and ``commitInfo.epochal`` (kind ``rewind``, the withdrawn ids).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deltalake import Transaction
from deltalake.exceptions import CommitFailedError

from spark_jobs.sinks.commit_log import CommitLog
from spark_jobs.sinks.delta_ledger import CommitKind, SinkAppIds, SinkCommitInfo, newest_first, read_state
from spark_jobs.sinks.delta_location import DeltaLocation
from spark_jobs.sinks.delta_publish import Publisher, load, properties
from spark_jobs.sinks.delta_rewind import plan_rewind

log = logging.getLogger(__name__)


class Restores:
    """Fence and rewind one sink's table (module docstring)."""

    def __init__(
        self,
        location: DeltaLocation,
        ids: SinkAppIds,
        fences: CommitLog,
        on_rewind: str,
        publisher: Callable[[], Publisher],
        attempts: int,
    ) -> None:
        self.location = location
        self.ids = ids
        self.fences = fences
        self.on_rewind = on_rewind
        self.publisher = publisher
        self.attempts = attempts

    @property
    def name(self) -> str:
        return self.location.uri

    def fence(self, generation: int) -> None:
        self.fences.fence(generation)
        for attempt in range(self.attempts):
            table = load(self.location)
            if table is None or read_state(table, self.ids).fenced >= generation:
                return
            self.location.check_commit_safety()
            info = SinkCommitInfo(CommitKind.FENCE, self.ids.job_id, self.ids.uid, generation)
            try:
                self.publisher().ledger_only(
                    table, properties(info, [Transaction(self.ids.fence, generation)])
                )
                return
            except CommitFailedError:
                if attempt + 1 == self.attempts:
                    raise

    def retract_after(
        self, checkpoint_id: int, generation: int, reason: str, *, before: int | None = None
    ) -> tuple[int, ...]:
        if self.on_rewind != "overwrite":
            log.info(
                "Delta table %s keeps the rows committed after checkpoint %s (%s)",
                self.name,
                checkpoint_id,
                reason,
            )
            return ()
        for attempt in range(self.attempts):
            table = load(self.location)
            if table is None:
                return ()
            commits = newest_first(table, self.ids)
            plan = plan_rewind(
                commits, after=checkpoint_id, generation=generation, before=before, table=self.name
            )
            if plan.done or not plan.withdrawn:
                return plan.withdrawn
            self.location.check_commit_safety()
            state = read_state(table, self.ids)
            info = SinkCommitInfo(
                CommitKind.REWIND,
                self.ids.job_id,
                self.ids.uid,
                generation,
                checkpoint_id,
                withdrawn=plan.withdrawn,
                restored_version=plan.target,
            )
            txns = [
                Transaction(self.ids.rewind, generation),
                Transaction(self.ids.fence, max(generation, state.fenced)),
            ]
            if state.committed is not None:
                txns.append(Transaction(self.ids.commits, state.committed.version))
            try:
                self.publisher().rewind(table, plan, properties(info, txns))
            except CommitFailedError:
                if attempt + 1 == self.attempts:
                    raise
                continue
            log.warning(
                "Delta table %s: withdrew checkpoints %s (%s)", self.name, list(plan.withdrawn), reason
            )
            return plan.withdrawn
        return ()

    def retracted_ids(self) -> frozenset[int]:
        if self.on_rewind != "overwrite":
            return frozenset()
        table = load(self.location)
        if table is None:
            return frozenset()
        return frozenset(
            n
            for c in newest_first(table, self.ids)
            if c.info is not None and c.info.kind is CommitKind.REWIND
            for n in c.info.withdrawn
        )
