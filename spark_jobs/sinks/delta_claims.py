"""Create-claims: fencing a Delta sink's table before it exists.

Once the table exists a fence is an application transaction that every data commit carries, so a
zombie's commit racing ``fence(g)`` conflicts with the fence commit in delta-rs and, decided again,
is refused (``delta_ledger``). Before the table exists there is nothing to conflict on: the fence is
only a document in the job's store (``CommitLog.fence``), and a committer that read the fences
before that document appeared could create the table after ``fence(g)`` returned. Create-claims
close that gap with a write-then-read on both sides, in the job's store::

    committer of generation h creating the table       fence(g)
    1. put_if_absent  _create_claims/g<h>-c<n>-<token>   1. put  _fences/g<g>.json
    2. read the fences: one above h -> refuse             2. list the claims of generations < g,
       (FencedTransactionError), release the claim           then look for the table
    3. create the table (create-only version 0)          3. a table: the fence commit in it;
    4. release the claim                                     claims found, no table: wait (below)

The store is linearizable (read-after-write, ``ObjectStore`` rule 4), so of two such actors at least
one sees the other's write: either the committer sees the fence and refuses, or the fence sees the
claim and does not return before that creation is settled. Settled means one of: the table exists
(fence(g) then makes its normal in-table fence commit, which any later commit of the claimant
conflicts with), or the claims are released (the claimant gave up without a table: no commit of it
can land any more). A claimant that died between 1 and 4 never releases its claim; after waiting
``wait_s`` the fence settles it itself: it creates the table, empty, with the schema and partition
columns the claim recorded, in ONE create-only commit of version 0 carrying the fence transaction.
That is the write the claimant needed, so its creation can no longer succeed (delta-rs refuses a
second version 0; the claimant decides again and is refused), whether it is dead or only slow.

Invariant: after ``fence(g)`` returns, no commit of a generation below g lands in the table.

Claims live under ``<job>/sinks/<uid>/_create_claims/`` (no sweep lists that prefix); each is
released by its claimant, and the fence deletes the claims of older generations once it is settled.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

from spark_jobs.sinks.commit_log import SinkLayout
from state_store.core.codec import decode_document, encode_document
from state_store.core.ports import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

CLAIM_KIND = "delta_create_claim"


@dataclass(frozen=True, slots=True)
class CreateClaim:
    """``_create_claims/g<gen>-c<n>-<token>.json``: a committer of ``generation`` is about to create
    the table for ``checkpoint_id`` with ``schema`` (Delta schema JSON) and ``partition_by``."""

    job_id: str
    sink_uid: str
    generation: int
    checkpoint_id: int
    schema: str
    partition_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StoredClaim:
    key: str
    generation: int


class CreateClaims:
    """The create-claims of one sink of one job (module docstring)."""

    def __init__(self, store: ObjectStore, job_id: str, uid: str) -> None:
        self.store = store
        self.job_id = job_id
        self.uid = uid
        self.prefix = f"{SinkLayout(job_id, uid).root}_create_claims/"

    def claim(self, generation: int, checkpoint_id: int, schema: str, partition_by: tuple[str, ...]) -> str:
        """Write a new claim (create-only, a fresh token per call); returns its key."""
        key = f"{self.prefix}g{generation:010d}-c{checkpoint_id:010d}-{secrets.token_hex(6)}.json"
        claim = CreateClaim(self.job_id, self.uid, generation, checkpoint_id, schema, partition_by)
        self.store.put_if_absent(key, encode_document(CLAIM_KIND, claim))
        return key

    def release(self, key: str) -> None:
        self.store.delete(key)

    def older_than(self, generation: int) -> list[StoredClaim]:
        """The claims of generations below ``generation`` (released ones are not listed)."""
        return [c for c in self._listed() if c.generation < generation]

    def read(self, claim: StoredClaim) -> CreateClaim | None:
        """The claim's body; None if it was released meanwhile (a ManifestError if damaged)."""
        try:
            data = self.store.get(claim.key).data
        except ObjectNotFound:
            return None
        return decode_document(data, CLAIM_KIND, CreateClaim, key=claim.key)

    def _listed(self) -> Iterator[StoredClaim]:
        for info in self.store.list(self.prefix):
            name = info.key[len(self.prefix) :]
            head = name.split("-", 1)[0]
            if name.endswith(".json") and head.startswith("g") and head[1:].isdigit():
                yield StoredClaim(info.key, int(head[1:]))
