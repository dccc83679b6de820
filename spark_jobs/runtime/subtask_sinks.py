"""The transactional sinks of one subtask: the stage's sink and its side-output sinks (two-phase
commit, ``state_store.core.twophase``).

    open(...)        begin transaction n per sink (the stage's sink first, then side outputs)
    write(uid, ...)  into the open transaction
    pre_commit(n)    barrier n: pre-commit every transaction n and begin n + 1 -- records after an
                     unaligned barrier belong to the next epoch and go nowhere visible
    abort_open()     after the acks: abort every transaction n + 1 (empty unless unaligned)

Invariants: one open transaction per sink at any time; a sink is pre-committed at most once per
subtask (the first barrier n); ``pre_committed`` keeps the opening order (the acks' order).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from spark_jobs.api.specs import SideOutput
from state_store.core.ports import ObjectStore
from state_store.core.twophase import PreCommittedTxn


class SubtaskSinks:
    """Open transactions by sink uid; ``main`` is the stage's sink, ``side`` maps tag -> uid.
    Created empty (the chain's exit holds it), opened once the operators are restored."""

    def __init__(self, subtask: int, attempt: int, generation: int) -> None:
        self.subtask, self.attempt, self.generation = subtask, attempt, generation
        self.main: str | None = None
        self.side: dict[str, str] = {}
        self.sinks: dict[str, Any] = {}
        self.txns: dict[str, Any] = {}
        self.pre_committed: dict[str, PreCommittedTxn] = {}

    def open(
        self,
        store: ObjectStore,
        job_id: str,
        checkpoint_id: int,
        main: tuple[str, Any] | None,
        side: dict[str, SideOutput],
    ) -> None:
        """Begin transaction ``checkpoint_id`` of the stage's sink (``main``: uid and sink spec),
        then of every side output (by tag)."""
        if main is not None:
            self.main = main[0]
            self._begin(store, job_id, main[0], main[1], checkpoint_id)
        for tag, output in side.items():
            self.side[tag] = output.uid
            self._begin(store, job_id, output.uid, output.sink, checkpoint_id)

    def _begin(self, store: ObjectStore, job_id: str, uid: str, spec: Any, checkpoint_id: int) -> None:
        sink = spec.create(store, job_id, uid)
        self.sinks[uid] = sink
        self.txns[uid] = sink.begin_transaction(checkpoint_id, self.subtask, self.attempt, self.generation)

    @property
    def uids(self) -> list[str]:
        return list(self.sinks)

    def write(self, uid: str, batch: pa.RecordBatch) -> None:
        self.sinks[uid].write(self.txns[uid], batch)

    def write_side(self, tag: str, batch: pa.RecordBatch) -> bool:
        """Write a side output to its sink; False when the tag has none."""
        uid = self.side.get(tag)
        if uid is None:
            return False
        self.write(uid, batch)
        return True

    def pre_commit(self, checkpoint_id: int) -> None:
        for uid, sink in self.sinks.items():
            self.pre_committed[uid] = sink.pre_commit(self.txns[uid])
            self.txns[uid] = sink.begin_transaction(
                checkpoint_id + 1, self.subtask, self.attempt, self.generation
            )

    def abort_open(self) -> None:
        for uid, sink in self.sinks.items():
            sink.abort(self.txns[uid])
