"""The restore side of a Delta sink: the fence, the rewind (``retract_after``) and what it withdrew.

Both are Delta commits of their own, retried when a concurrent commit of the sink wins the race
(delta-rs's conflict check on the shared application ids, see ``delta_ledger``), and idempotent:

* ``fence(g)``: the job-store fence document first (it covers a table that does not exist yet),
  then, if the table exists and its fence is below *g*, a commit carrying only the fence app
  transaction (version *g*) and ``commitInfo.epochal`` (kind ``fence``). With no table, a creation
  claimed by an older generation is settled first (``delta_claims``): the fence waits for that table
  (then commits in it) or for the claim's release, and after ``claim_wait_s`` creates the table
  itself, empty, carrying the fence. Invariant: once ``fence(g)`` returns, no commit of a
  generation below *g* lands;
* ``retract_after(a, g, ...)``: nothing with ``on_rewind="keep"``; with ``"overwrite"`` the plan of
  ``delta_rewind`` and one RESTORE (or delete) commit carrying the rewind app transaction (version
  *g*: a second call finds it and returns the same ids), the fence and the data app transaction
  (unchanged version), and ``commitInfo.epochal`` (kind ``rewind``, the withdrawn ids).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from deltalake import Schema as DeltaSchema
from deltalake import Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import create_table_with_add_actions

from spark_jobs.sinks.commit_log import CommitLog
from spark_jobs.sinks.delta_claims import CreateClaims, StoredClaim
from spark_jobs.sinks.delta_ledger import CommitKind, SinkAppIds, SinkCommitInfo, newest_first, read_state
from spark_jobs.sinks.delta_location import DeltaLocation
from spark_jobs.sinks.delta_publish import Publisher, load, properties
from spark_jobs.sinks.delta_rewind import plan_rewind
from state_store.core.codec import ManifestError
from state_store.core.twophase import SinkCommitError

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
        claims: CreateClaims,
        claim_wait_s: float,
    ) -> None:
        self.location = location
        self.ids = ids
        self.fences = fences
        self.on_rewind = on_rewind
        self.publisher = publisher
        self.attempts = attempts
        self.claims = claims
        self.claim_wait_s = claim_wait_s

    @property
    def name(self) -> str:
        return self.location.uri

    def fence(self, generation: int) -> None:
        """The fence document (write), then the claims and the table (read): see ``delta_claims``."""
        self.fences.fence(generation)
        deadline = time.monotonic() + self.claim_wait_s
        delay = 0.02
        while True:
            claims = self.claims.older_than(generation)  # listed before the table is looked for
            if load(self.location) is not None:
                self._fence_table(generation)
                for claim in claims:  # settled: a claimant's creation now fails or is fenced
                    self.claims.release(claim.key)
                return
            if not claims:
                return
            if time.monotonic() >= deadline:
                self._create_fenced(generation, claims)
                continue
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _fence_table(self, generation: int) -> None:
        """The fence app transaction in the table (a commit of its own unless already there)."""
        for attempt in range(self.attempts):
            table = load(self.location)
            if table is None or read_state(table, self.ids).fenced >= generation:
                return
            self.location.check_commit_safety()
            try:
                self.publisher().ledger_only(
                    table, properties(self._fence_info(generation), self._fence_txn(generation))
                )
                return
            except CommitFailedError:
                if attempt + 1 == self.attempts:
                    raise

    def _create_fenced(self, generation: int, claims: list[StoredClaim]) -> None:
        """Settle claims nobody released within ``claim_wait_s``: create the table, empty, with a
        claim's schema, in one create-only commit carrying the fence (``delta_claims``). Returns
        when the table exists (made here or by someone else) or the claims are gone."""
        for stored in claims:
            try:
                claim = self.claims.read(stored)
            except ManifestError as exc:
                raise SinkCommitError(
                    f"Delta table {self.name}: fencing generation {generation} found the create-claim "
                    f"{stored.key} of generation {stored.generation} unreadable ({exc}) and no table; "
                    "if no process of that generation runs any more, delete the claim and fence again"
                ) from None
            if claim is None:
                continue  # released meanwhile
            self.location.check_commit_safety()
            try:
                create_table_with_add_actions(
                    self.location.uri,
                    DeltaSchema.from_json(claim.schema),
                    [],
                    mode="error",
                    partition_by=list(claim.partition_by) or None,
                    storage_options=self.location.options or None,
                    commit_properties=properties(self._fence_info(generation), self._fence_txn(generation)),
                )
            except (CommitFailedError, DeltaError):
                if load(self.location) is None:
                    raise
                return  # the claimant (or another fence) created it first: the caller fences in it
            log.warning(
                "Delta table %s: a commit of generation %s (checkpoint %s) claimed the table's creation "
                "%.0f s ago and has not made it; the fence of generation %s created the table empty "
                "(the claim's schema), so that commit can no longer land",
                self.name,
                claim.generation,
                claim.checkpoint_id,
                self.claim_wait_s,
                generation,
            )
            return

    def _fence_info(self, generation: int) -> SinkCommitInfo:
        return SinkCommitInfo(CommitKind.FENCE, self.ids.job_id, self.ids.uid, generation)

    def _fence_txn(self, generation: int) -> list[Transaction]:
        return [Transaction(self.ids.fence, generation)]

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
