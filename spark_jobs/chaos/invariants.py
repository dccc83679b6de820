"""The six invariants of issue 8, checked against the fault-free view of the store (``inner``):

1. committed sink output equals the fault-free run's: same rows (no loss, no duplicates) and, per
   key, the same order of commits;
2. the state restored from every retained checkpoint equals the fault-free state at the same
   input cut (checkpoint ids differ between runs; the cut does not);
3. ``LATEST`` only references checkpoints that verify (deep: every file read back against its
   checksum; a bit flipped on the way to the store is refused on upload) and never moves backwards
   (checked after every action); a failed validation gate leaves it and the sink unchanged;
4. no file referenced by a retained checkpoint (newest ``retained_checkpoints`` completed ones and
   the one ``LATEST`` names) or by an in-flight checkpoint's acks is missing (checked after every
   action and after the final retention);
5. after the grace period, retention leaves no orphan: no checkpoint folder but retained or
   in-flight ones (and the id high-water mark's ``_pending.json``), no ``shared/`` file nobody
   references, no staged sink file no commit lists;
6. after the last fault the job completes a new checkpoint within ``max_recovery_runs`` DAG runs.

A checker never repairs anything; it only reads and reports ``Violation`` lines.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.chaos.driver import Driver
from spark_jobs.chaos.observe import (
    Row,
    committed_rows,
    completed_metadata,
    latest_pointer,
    positions_key,
    state_digest,
)
from spark_jobs.sinks.commit_log import CommitLog
from state_store.core import documents
from state_store.core.codec import ManifestError
from state_store.core.completed import load_completed
from state_store.core.layout import JobLayout
from state_store.core.manifests import (
    AckRecord,
    CompletedMetadata,
    DecisionRecord,
    LatestPointer,
    PendingRecord,
)
from state_store.core.ports import ObjectNotFound, ObjectStore


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: int
    message: str

    def __str__(self) -> str:
        return f"invariant {self.invariant}: {self.message}"


@dataclass
class Reference:
    """The fault-free run: committed rows after each tick, and state digests by input cut."""

    rows_by_tick: list[list[Row]]
    states: dict[Any, dict[str, Any]]
    key_columns: tuple[int, ...]
    order_column: int


class Checker:
    def __init__(self, job: Job, store: ObjectStore, sink_uid: str, driver: Driver | None = None) -> None:
        self.job, self.store, self.sink_uid, self.driver = job, store, sink_uid, driver
        self.layout = JobLayout(job.job_id)
        self.violations: list[Violation] = []
        self.latest_seen = 0
        self.completed_max = 0
        self._verified: set[tuple[int, str]] = set()
        self._meta_cache: dict[tuple[str, str], Any] = {}
        self.latest_torn = ""

    def fail(self, invariant: int, message: str) -> None:
        violation = Violation(invariant, message)
        if violation not in self.violations:
            self.violations.append(violation)

    # -- after every action -----------------------------------------------------------------
    def monitor(self) -> None:
        self.check_latest()
        newest = max(completed_metadata(self.store, self.job.job_id, self._meta_cache), default=0)
        if newest > self.completed_max:
            self.completed_max = newest
            if self.driver is not None:
                self.driver.note(f"completed:{newest}")
        self.check_references()

    def check_latest(self) -> None:
        pointer = latest_pointer(self.store, self.job.job_id)
        if isinstance(pointer, str):
            # A torn pointer write (only a store that broke atomic visibility does that) names no
            # checkpoint; recovery ignores it and the next completion replaces it (check_final).
            self.latest_torn = pointer
            return
        self.latest_torn = ""
        if pointer is None:
            if self.latest_seen:
                self.fail(3, f"LATEST disappeared (it named checkpoint {self.latest_seen})")
            return
        if pointer.checkpoint_id < self.latest_seen:
            self.fail(3, f"LATEST moved backwards from {self.latest_seen} to {pointer.checkpoint_id}")
        self.latest_seen = max(self.latest_seen, pointer.checkpoint_id)
        self._verify(pointer)

    def _verify(self, pointer: LatestPointer) -> None:
        token = (pointer.checkpoint_id, pointer.metadata_sha256)
        if token in self._verified:
            return
        try:
            completed = load_completed(self.store, self.layout, pointer.checkpoint_id, deep=True)
        except Exception as exc:
            self.fail(3, f"LATEST names checkpoint {pointer.checkpoint_id}, which does not verify: {exc}")
            return
        if completed.metadata_sha256 != pointer.metadata_sha256:
            self.fail(3, f"LATEST names checkpoint {pointer.checkpoint_id} with another metadata checksum")
            return
        self._verified.add(token)

    def retained_ids(self, metas: dict[int, Any] | None = None) -> set[int]:
        if metas is None:
            metas = completed_metadata(self.store, self.job.job_id, self._meta_cache)
        regular = sorted((i for i, m in metas.items() if not m.properties.savepoint), reverse=True)
        keep = set(regular[: self.job.retained_checkpoints])
        keep |= {i for i, m in metas.items() if m.properties.savepoint}
        pins = (self.layout.pinned_id_of(info.key) for info in self.store.list(self.layout.pins_prefix))
        keep |= {i for i in pins if i is not None}  # pinned (a NO_CLAIM restore, an operator)
        if self.latest_seen:
            keep.add(self.latest_seen)
        return keep & set(metas)

    def undecided_ids(self) -> list[int]:
        ids = set()
        for info in self.store.list(self.layout.checkpoints_prefix):
            if info.key.endswith("/_pending.json"):
                checkpoint_id = self.layout.checkpoint_id_of(info.key)
                if checkpoint_id is not None and self.store.head(self.layout.decision(checkpoint_id)) is None:
                    ids.add(checkpoint_id)
        return sorted(ids)

    def in_flight_refs(self, ids: list[int] | None = None) -> dict[int, set[str]]:
        """Files named by the acks of ``ids`` (default: the undecided checkpoints)."""
        refs: dict[int, set[str]] = {}
        for checkpoint_id in self.undecided_ids() if ids is None else ids:
            keys: set[str] = set()
            for info in self.store.list(self.layout.acks_prefix(checkpoint_id)):
                try:
                    keys |= {h.key for h in documents.read(self.store, info.key, AckRecord).handles}
                except (ManifestError, ObjectNotFound):
                    continue
            refs[checkpoint_id] = keys
        return refs

    def check_references(self) -> None:
        metas = completed_metadata(self.store, self.job.job_id, self._meta_cache)
        existing = {info.key for info in self.store.list(self.layout.root)}
        for checkpoint_id in sorted(self.retained_ids(metas)):
            missing = [h.key for h in metas[checkpoint_id].handles if h.key not in existing]
            if missing:
                self.fail(
                    4, f"retained checkpoint {checkpoint_id} lost {len(missing)} file(s), e.g. {missing[0]}"
                )
        for checkpoint_id, keys in self.in_flight_refs().items():
            missing = sorted(keys - existing)
            if missing:
                self.fail(
                    4, f"in-flight checkpoint {checkpoint_id} lost {len(missing)} file(s), e.g. {missing[0]}"
                )

    def before_gate(self) -> Any:
        pointer = latest_pointer(self.store, self.job.job_id)
        return getattr(pointer, "checkpoint_id", None)

    def after_gate(self, checkpoint_id: int, latest_before: Any) -> None:
        """A failed validation gate: LATEST unchanged, checkpoint n aborted, nothing of n committed."""
        after = getattr(latest_pointer(self.store, self.job.job_id), "checkpoint_id", None)
        if after != latest_before:
            self.fail(3, f"a failed validation gate moved LATEST from {latest_before} to {after}")
        if checkpoint_id in CommitLog(self.store, self.job.job_id, self.sink_uid).committed_ids():
            self.fail(1, f"checkpoint {checkpoint_id} failed validation but its sink output was committed")
        if self.store.head(self.layout.metadata(checkpoint_id)) is not None:
            self.fail(3, f"checkpoint {checkpoint_id} failed validation but has _metadata.json")

    # -- at the end of a schedule -----------------------------------------------------------
    def check_output(self, reference: Reference, tick: int) -> None:
        try:
            rows = committed_rows(self.store, self.job.job_id, self.sink_uid)
        except Exception as exc:
            self.fail(1, f"committed output cannot be read: {exc}")
            return
        expected = reference.rows_by_tick[tick]
        if sorted(rows, key=repr) != sorted(expected, key=repr):
            got, want = _counts(rows), _counts(expected)
            lost = sum((want - got).values())
            dup = sum((got - want).values())
            self.fail(1, f"committed output differs: {lost} row(s) lost, {dup} extra/duplicate row(s)")
            return
        if _per_key(rows, reference) != _per_key(expected, reference):
            self.fail(1, "committed output has the same rows but another per-key order")

    def check_state(self, reference: Reference) -> None:
        metas = completed_metadata(self.store, self.job.job_id, self._meta_cache)
        for checkpoint_id in sorted(self.retained_ids()):
            meta = metas[checkpoint_id]
            cut = positions_key(meta)
            if meta.properties.savepoint and all(end == 0 for _, end in cut):
                continue  # a savepoint taken before the first epoch: the empty state
            if cut not in reference.states:
                self.fail(
                    2, f"checkpoint {checkpoint_id} has an input cut the fault-free run never made: {cut}"
                )
                continue
            try:
                digest = state_digest(self.store, meta, self.job.max_parallelism)
            except Exception as exc:
                self.fail(2, f"checkpoint {checkpoint_id} cannot be restored: {type(exc).__name__}: {exc}")
                continue
            if digest != reference.states[cut]:
                differing = sorted(k for k in digest if digest[k] != reference.states[cut].get(k))
                self.fail(
                    2, f"state restored from checkpoint {checkpoint_id} differs in {', '.join(differing)}"
                )

    def check_final_latest(self) -> None:
        self.check_latest()
        if self.latest_torn:
            self.fail(3, f"LATEST still does not decode after the last epoch: {self.latest_torn}")

    def unreadable_ids(self) -> set[int]:
        """Checkpoints whose protocol documents do not decode: retention keeps them on purpose
        (nothing is deleted on bad input) for an operator to inspect -- not orphans."""
        out: set[int] = set()
        for info in self.store.list(self.layout.checkpoints_prefix):
            name = info.key.rsplit("/", 1)[1]
            checkpoint_id = self.layout.checkpoint_id_of(info.key)
            if checkpoint_id is None or name not in ("_metadata.json", "_decision.json", "_pending.json"):
                continue
            try:
                documents.decode(self.store.get(info.key).data, _DOC_TYPES[name], key=info.key)
            except (ManifestError, ObjectNotFound):
                out.add(checkpoint_id)
        return out

    def check_orphans(self) -> None:
        unreadable = self.unreadable_ids()
        retained = self.retained_ids() | unreadable
        in_flight = self.in_flight_refs()
        in_flight |= self.in_flight_refs(sorted(unreadable - set(in_flight)))  # kept with their folder
        metas = completed_metadata(self.store, self.job.job_id, self._meta_cache)
        referenced = {h.key for i in retained if i in metas for h in metas[i].handles}
        referenced |= {k for keys in in_flight.values() for k in keys}
        allocated = [
            i
            for info in self.store.list(self.layout.checkpoints_prefix)
            if info.key.endswith("/_pending.json")
            and (i := self.layout.checkpoint_id_of(info.key)) is not None
        ]
        high_water = self.layout.pending(max(allocated)) if allocated else ""
        orphans: list[str] = []
        for info in self.store.list(self.layout.checkpoints_prefix):
            checkpoint_id = self.layout.checkpoint_id_of(info.key)
            if checkpoint_id in retained or checkpoint_id in in_flight or info.key == high_water:
                continue
            if info.key not in referenced:
                orphans.append(info.key)
        orphans += [i.key for i in self.store.list(self.layout.shared_prefix) if i.key not in referenced]
        log = CommitLog(self.store, self.job.job_id, self.sink_uid)
        try:
            committed = {h.key for entry in log.entries(include_retracted=True) for h in entry.files}
        except Exception as exc:
            self.fail(5, f"the sink commit log cannot be read: {exc}")
            return
        orphans += [
            i.key
            for i in self.store.list(log.layout.staged_prefix)
            if i.key not in committed and i.key not in referenced
        ]
        if orphans:
            self.fail(5, f"{len(orphans)} orphan file(s) survive the grace period, e.g. {sorted(orphans)[0]}")

    def check_recovery(self, driver: Driver, max_recovery_runs: int) -> int | None:
        """Invariant 6; returns the DAG runs from the last fault to the next completion."""
        for tick in driver.stuck_ticks:
            self.fail(6, f"tick {tick} made no progress within {driver.max_actions} actions")
        faults = [e for e in driver.events if e.what.startswith("fault:")]
        if not faults:
            return 0
        last = faults[-1]
        after = [e for e in driver.events if e.what.startswith("completed:") and e.seq > last.seq]
        if not after:
            self.fail(6, f"no checkpoint completed after the last fault ({last.what[6:]})")
            return None
        runs = after[0].run - last.run + 1
        if runs > max_recovery_runs:
            self.fail(6, f"recovery after {last.what[6:]} took {runs} DAG runs (bound {max_recovery_runs})")
        return runs


_DOC_TYPES: dict[str, Any] = {
    "_metadata.json": CompletedMetadata,
    "_decision.json": DecisionRecord,
    "_pending.json": PendingRecord,
}


def _counts(rows: list[Row]) -> Any:
    from collections import Counter

    return Counter(map(repr, rows))


def _per_key(rows: list[Row], reference: Reference) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = defaultdict(list)
    for row in rows:
        out[tuple(row[i] for i in reference.key_columns)].append(row[reference.order_column])
    return dict(out)
