"""The operator chain of a subtask (Flink's OperatorChain) and its exit, where output leaves.

::

    push(batch, input) -> op 0 -> op 1 -> ... -> op k -> StageExit -> the sinks tapping the chain's end
                       |        |                               `-> the consumer's subtasks (by key)
                       `--------`-- sinks tapping position i (op i's input) receive the same rows
    side(tag, batch) of any operator ------------------> StageExit -> the tag's side sink, or dropped

Invariants:
  * operator i's output is operator i + 1's input, the last operator's output is the exit; a chain
    without operators hands batches and watermarks straight to the exit;
  * the first operator of a two-input stage is a ``CoProcessOperator``: the input index picks the side;
  * a non-empty batch reaching position i is written to every sink tapping i before op i sees it;
  * the exit writes a non-empty batch to every sink tapping the chain's end, and splits it by key
    group into one message per destination subtask of the consumer if there is one (else, with no
    sink either, it is dropped: a stage whose branches all end in taps);
  * a watermark leaves only when it advances; statuses, barriers and cancellation markers go to
    every subtask of the consumer; the sequence numbers of a subtask's messages strictly increase;
  * a side output goes to the side sink of its tag, else it is counted in ``side_dropped``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_jobs.runtime.keys import KeySpec, key_column, key_groups, split_by, subtasks_of_key_groups
from spark_jobs.runtime.messages import Message, to_message
from spark_jobs.runtime.operators.base import Operator, Output
from spark_jobs.runtime.operators.process import CoProcessOperator
from spark_jobs.runtime.subtask_sinks import CHAIN_END, SubtaskSinks
from state_store.core.stream import Watermark


@dataclass(frozen=True, slots=True)
class Route:
    """Where a stage's output goes: the consumer stage keys this input by ``key``; this subtask
    feeds it as channel ``channel``; the consumer has ``width`` subtasks."""

    key: KeySpec
    channel: int
    width: int
    max_parallelism: int
    parallelism: int

    def split(self, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        """The batch's rows per destination subtask (the owner of their key group)."""
        groups = key_groups(key_column(batch, self.key), self.max_parallelism)
        targets = subtasks_of_key_groups(groups, self.max_parallelism, self.parallelism)
        parts = split_by(batch, targets, self.parallelism)
        return [(dest, part) for dest, part in enumerate(parts) if part is not None]


class StageExit:
    """Output of the last operator (module docstring): the sink, the next stage, or nothing."""

    def __init__(self, sinks: SubtaskSinks, route: Route | None) -> None:
        self.sinks, self.route = sinks, route
        self.outbox: list[tuple[int, Message]] = []
        self.rows_out = 0
        self.side_dropped: dict[str, int] = {}
        self._seq = 0
        self._last_watermark = -(2**63)

    def emit(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows_out += batch.num_rows
        self.sinks.write_tapped(CHAIN_END, batch)
        if self.route is not None:
            for dest, part in self.route.split(batch):
                self._send(dest, part)

    def emit_watermark(self, timestamp: int) -> None:
        if timestamp > self._last_watermark:
            self._last_watermark = timestamp
            self.broadcast(Watermark(timestamp))

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        if not self.sinks.write_side(tag, batch):
            self.side_dropped[tag] = self.side_dropped.get(tag, 0) + batch.num_rows

    def broadcast(self, item: object) -> None:
        if self.route is not None:
            for dest in range(self.route.width):
                self._send(dest, item)

    def _send(self, dest: int, item: object) -> None:
        assert self.route is not None
        self.outbox.append((dest, to_message(self.route.channel, self._seq, item)))
        self._seq += 1


class _Link:
    """Output of operator i = input of operator i + 1 (chain position i + 1, written first to the
    sinks tapping it); side outputs go to the exit."""

    def __init__(self, nxt: Operator, exit: StageExit, position: int) -> None:
        self.nxt, self.exit, self.position = nxt, exit, position

    def emit(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self.exit.sinks.write_tapped(self.position, batch)
        self.nxt.process_batch(batch)

    def emit_watermark(self, timestamp: int) -> None:
        self.nxt.process_watermark(timestamp)

    def side(self, tag: str, batch: pa.RecordBatch) -> None:
        self.exit.side(tag, batch)


class OperatorChain:
    """The stage's operators wired in order (module docstring); ``rows_in`` counts pushed rows."""

    def __init__(self, ops: list[Operator], exit: StageExit) -> None:
        self.ops, self.exit = ops, exit
        self.rows_in = 0
        self.events = 0
        """Batches and watermarks pushed so far (local recovery keeps a chain only when none came
        after its snapshot)."""
        outputs: list[Output] = [_Link(nxt, exit, i) for i, nxt in enumerate(ops[1:], start=1)]
        for op, output in zip(ops, [*outputs, exit]):
            op.output = output

    @property
    def stateful(self) -> list[Operator]:
        """The operators with state (each has a uid), in chain order."""
        return [op for op in self.ops if op.stateful and op.uid]

    def push(self, batch: pa.RecordBatch, input_index: int = 0) -> None:
        self.events += 1
        self.rows_in += batch.num_rows
        first = self.ops[0] if self.ops else None
        if first is not None and batch.num_rows:
            self.exit.sinks.write_tapped(0, batch)
        if isinstance(first, CoProcessOperator):
            first.process_input(batch, input_index)
        elif first is not None:
            first.process_batch(batch)
        else:
            self.exit.emit(batch)

    def watermark(self, timestamp: int) -> None:
        self.events += 1
        if self.ops:
            self.ops[0].process_watermark(timestamp)
        else:
            self.exit.emit_watermark(timestamp)

    def metrics(self) -> dict[str, dict[str, Any]]:
        out = {op.uid: op.metrics() for op in self.ops if op.uid}
        for op in self.ops:
            note = getattr(op, "state_in_memory", None)
            if op.uid and note:
                out[op.uid] = {**out[op.uid], "state_in_memory": note}
        return out

    def dispose(self) -> None:
        for op in self.ops:
            op.dispose()
