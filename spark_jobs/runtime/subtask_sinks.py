"""The transactional sinks of one subtask: the stage's sink and its side-output sinks (two-phase
commit, ``state_store.core.twophase``).

    open(...)        begin transaction n per sink (the stage's sinks in step order, then side outputs)
    write(uid, ...)  into the open transaction
    pre_commit(n)    barrier n: pre-commit every transaction n and begin n + 1 -- records after an
                     unaligned barrier belong to the next epoch and go nowhere visible
    abort_open()     after the acks: abort every transaction n + 1 (empty unless unaligned)

A stage's sink *taps* the output of one step of the chain (``taps``: chain position -> sink uids;
position i = the input of operator i, ``CHAIN_END`` = the last operator's output), so one stage may
fill several sinks with the rows of the same or of different steps.

Invariants: one open transaction per sink at any time; a sink is pre-committed at most once per
subtask (the first barrier n); ``pre_committed`` keeps the opening order (the acks' order).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from spark_jobs.api.specs import SideOutput
from state_store.core.ports import ObjectStore
from state_store.core.twophase import PreCommittedTxn

CHAIN_END = -1
"""The tap position of sinks that receive the chain's output (what leaves the last operator)."""


class SubtaskSinks:
    """Open transactions by sink uid; ``taps`` maps a chain position to the uids of the stage's sinks
    there, ``side`` maps tag -> uid. Created empty (the chain's exit holds it), opened once the
    operators are restored."""

    def __init__(self, subtask: int, attempt: int, generation: int) -> None:
        self.subtask, self.attempt, self.generation = subtask, attempt, generation
        self.taps: dict[int, list[str]] = {}
        self.side: dict[str, str] = {}
        self.sinks: dict[str, Any] = {}
        self.txns: dict[str, Any] = {}
        self.pre_committed: dict[str, PreCommittedTxn] = {}

    def open(
        self,
        store: ObjectStore,
        job_id: str,
        checkpoint_id: int,
        taps: list[tuple[int, str, Any]],
        side: dict[str, SideOutput],
    ) -> None:
        """Begin transaction ``checkpoint_id`` of each of the stage's sinks (``taps``: chain position,
        uid and sink spec, in step order), then of every side output (by tag)."""
        for position, uid, spec in taps:
            self.taps.setdefault(position, []).append(uid)
            self._begin(store, job_id, uid, spec, checkpoint_id)
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

    def write_tapped(self, position: int, batch: pa.RecordBatch) -> None:
        """Write ``batch`` (the rows passing chain position ``position``) to every sink tapping it."""
        for uid in self.taps.get(position, ()):
            self.write(uid, batch)

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
