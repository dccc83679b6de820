"""Block and resume at the input gate (issue 19, seed 000): the exact events of every aligner branch.

The gate blocks a channel when it hands a barrier to a handler that blocks on it; the aligner resumes
every channel it does not align on, and every channel it kept once the alignment is over. Each
scenario below pushes one item at a time onto one channel, drains the gate, and compares one ordered
log of what the gate and the listener saw:

    ("block", c)    the gate blocked channel c (it delivered a barrier)
    ("resume", c)   the handler resumed channel c
    ("trigger", n)  checkpoint n was triggered        ("abort", n, reason)  n was aborted
    ("record", c, x)  record x of channel c was handed out
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.stream import (
    END_OF_PARTITION,
    AlternatingCheckpointBarrierHandler,
    BarrierAbortReason,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointBarrierAligner,
    CheckpointBarrierHandler,
    CheckpointBarrierTracker,
    CheckpointBarrierUnaligner,
    CheckpointedInputGate,
    CheckpointMetrics,
    CheckpointOptions,
    ScriptedChannel,
    StreamCorruptError,
    is_event,
)
from state_store.core.stream.input_gate import ConsumptionEvent

from .support import barrier

SUBSUMED = BarrierAbortReason.CHECKPOINT_DECLINED_SUBSUMED
ON_CANCEL = BarrierAbortReason.CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER
END_OF_STREAM = BarrierAbortReason.CHECKPOINT_DECLINED_INPUT_END_OF_STREAM

Event = tuple[object, ...]


def block(channel: int) -> Event:
    return ("block", channel)


def resume(channel: int) -> Event:
    return ("resume", channel)


def trigger(checkpoint_id: int) -> Event:
    return ("trigger", checkpoint_id)


def abort(checkpoint_id: int, reason: BarrierAbortReason) -> Event:
    return ("abort", checkpoint_id, reason)


def record(channel: int, item: object) -> Event:
    return ("record", channel, item)


class SequenceListener:
    """A checkpoint listener writing into the same log as the gate's block/resume events."""

    def __init__(self, log: list[Event]) -> None:
        self.log = log

    def trigger_checkpoint_on_barrier(
        self, checkpoint_id: int, timestamp: int, options: CheckpointOptions, metrics: CheckpointMetrics
    ) -> None:
        self.log.append(trigger(checkpoint_id))

    def abort_checkpoint_on_barrier(self, checkpoint_id: int, reason: BarrierAbortReason) -> None:
        self.log.append(abort(checkpoint_id, reason))


HANDLERS = ("aligner", "alternating", "tracker", "unaligner")


def build_handler(kind: str, num_channels: int, listener: SequenceListener) -> CheckpointBarrierHandler:
    if kind == "aligner":
        return CheckpointBarrierAligner(num_channels, listener)
    if kind == "alternating":
        return AlternatingCheckpointBarrierHandler(
            CheckpointBarrierAligner(num_channels, listener),
            CheckpointBarrierUnaligner(num_channels, listener),
        )
    if kind == "tracker":
        return CheckpointBarrierTracker(num_channels, listener)
    assert kind == "unaligner"
    return CheckpointBarrierUnaligner(num_channels, listener)


class Harness:
    """A gate over scripted channels whose block/resume events, outcomes and records share one log."""

    def __init__(self, num_channels: int, kind: str = "aligner") -> None:
        self.log: list[Event] = []
        self.handler = build_handler(kind, num_channels, SequenceListener(self.log))
        self.channels = [ScriptedChannel() for _ in range(num_channels)]
        self.gate = CheckpointedInputGate(
            self.channels, self.handler, consumption_listener=self.on_consumption
        )

    def on_consumption(self, event: ConsumptionEvent, channel: int) -> None:
        self.log.append(block(channel) if event is ConsumptionEvent.BLOCKED else resume(channel))

    def drain(self) -> None:
        while (polled := self.gate.poll_next()) is not None:
            if not is_event(polled.item):
                self.log.append(record(polled.channel, polled.item))

    def feed(self, channel: int, item: object) -> None:
        """Make ``item`` available on ``channel`` and poll until nothing more is available."""
        self.channels[channel].push(item)
        self.drain()

    def run(self, steps: list[tuple[int, object]]) -> None:
        for channel, item in steps:
            self.feed(channel, item)


@dataclass(frozen=True)
class Scenario:
    num_channels: int
    steps: list[tuple[int, object]]
    expected: list[Event]


# Each scenario is one branch of CheckpointBarrierAligner.processBarrier in seed 000 (or of the
# cancellation / end-of-partition paths that release an alignment); the comment says which, in our
# words. The gate's block always comes first: the gate stops a channel as it yields the barrier.
SCENARIOS: dict[str, Scenario] = {
    # Seed: with exactly one input channel the aligner resumes that channel first, then triggers the
    # barrier only if its id is newer than the current one; an id that is not newer is just dropped.
    "single_channel_fast_path": Scenario(
        1,
        [(0, barrier(1)), (0, "r"), (0, barrier(1)), (0, barrier(3))],
        [
            block(0), resume(0), trigger(1),
            record(0, "r"),
            block(0), resume(0),
            block(0), resume(0), trigger(3),
        ],
    ),
    # Seed: while an alignment is pending, a barrier with an id below the current one is a trailing
    # barrier of an obsolete checkpoint: its channel is resumed at once and the barrier ignored.
    "stale_barrier_while_aligning": Scenario(
        2,
        [(0, barrier(5)), (1, barrier(4)), (1, "r"), (1, barrier(5))],
        [
            block(0),
            block(1), resume(1),
            record(1, "r"),
            block(1), resume(0), resume(1), trigger(5),
        ],
    ),
    # Seed: with no alignment pending, a barrier whose id is not above the current one (here: older
    # than the completed checkpoint) comes from a subsumed checkpoint: resume its channel, ignore it.
    "stale_barrier_without_alignment": Scenario(
        2,
        [(0, barrier(5)), (1, barrier(5)), (0, barrier(3)), (0, "r")],
        [
            block(0), block(1), resume(0), resume(1), trigger(5),
            block(0), resume(0),
            record(0, "r"),
        ],
    ),
    # Seed: a cancellation marker that comes first makes its id current with zero barriers; a later
    # barrier of that id finds no alignment and an id that is not newer: resume its channel, ignore it.
    "barrier_of_checkpoint_cancelled_before_alignment": Scenario(
        2,
        [(0, CancelCheckpointMarker(3)), (1, barrier(3)), (0, barrier(4)), (1, barrier(4))],
        [
            abort(3, ON_CANCEL),
            block(1), resume(1),
            block(0), block(1), resume(0), resume(1), trigger(4),
        ],
    ),
    # Seed: a marker for the checkpoint being aligned releases every blocked channel, then aborts; the
    # remaining barriers of that checkpoint are then "current but cancelled": resumed and ignored.
    "barrier_of_checkpoint_cancelled_while_aligning": Scenario(
        3,
        [(0, barrier(2)), (0, "r"), (1, CancelCheckpointMarker(2)), (2, barrier(2))],
        [
            block(0),
            resume(0), abort(2, ON_CANCEL),
            record(0, "r"),
            block(2), resume(2),
        ],
    ),
    # Seed: a marker for a newer checkpoint stops the current alignment (release) and starts the newer
    # one as cancelled; barriers of the old id are stale, those of the cancelled id are ignored.
    "barrier_of_checkpoint_cancelled_by_newer_marker": Scenario(
        3,
        [(0, barrier(2)), (1, CancelCheckpointMarker(3)), (2, barrier(2)), (0, barrier(3))],
        [
            block(0),
            resume(0), abort(3, ON_CANCEL),
            block(2), resume(2),
            block(0), resume(0),
        ],
    ),
    # Seed: a barrier newer than the pending alignment aborts it (subsumed), releases every channel
    # blocked so far, and begins the new alignment with the new barrier's channel kept blocked.
    "newer_barrier_subsumes_pending_alignment": Scenario(
        3,
        [(0, barrier(1)), (1, barrier(1)), (2, barrier(2)), (0, barrier(2)), (1, barrier(2))],
        [
            block(0),
            block(1),
            block(2), abort(1, SUBSUMED), resume(0), resume(1),
            block(0),
            block(1), resume(0), resume(1), resume(2), trigger(2),
        ],
    ),
    # Seed: once barriers received + closed channels == all channels, every blocked channel is
    # released, then the checkpoint is triggered; records behind a barrier wait for the release.
    "completed_alignment": Scenario(
        3,
        [(2, barrier(1)), (0, barrier(1)), (0, "after"), (1, barrier(1))],
        [
            block(2),
            block(0),
            block(1), resume(0), resume(1), resume(2), trigger(1),
            record(0, "after"),
        ],
    ),
    # The end of a channel during an alignment aborts it and releases the blocked channels (seed 000
    # does not show this method; Flink 1.11 notifies the abort, then releases); the aborted id's
    # trailing barrier is then ignored and resumed, and the closed channel counts toward the next one.
    "end_of_partition_during_alignment": Scenario(
        3,
        [(0, barrier(1)), (2, END_OF_PARTITION), (1, barrier(1)), (0, barrier(2)), (1, barrier(2))],
        [
            block(0),
            abort(1, END_OF_STREAM), resume(0),
            block(1), resume(1),
            block(0),
            block(1), resume(0), resume(1), trigger(2),
        ],
    ),
    # Seed: closed channels count toward completion (numBarriersReceived + numClosedChannels).
    "closed_channel_counts_toward_completion": Scenario(
        3,
        [(1, END_OF_PARTITION), (0, barrier(1)), (2, barrier(1))],
        [
            block(0),
            block(2), resume(0), resume(2), trigger(1),
        ],
    ),
    # The gate never reads a blocked channel, so a repeated barrier waits behind the block; once the
    # alignment completes it is read, and it is then a stale barrier (resumed, ignored).
    "repeated_barrier_waits_behind_the_block": Scenario(
        2,
        [(0, barrier(1)), (0, barrier(1)), (1, barrier(1))],
        [
            block(0),
            block(1), resume(0), resume(1), trigger(1),
            block(0), resume(0),
        ],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", SCENARIOS)
def test_gate_sees_the_seed_block_resume_sequence(name: str) -> None:
    scenario = SCENARIOS[name]
    harness = Harness(scenario.num_channels)
    harness.run(scenario.steps)
    assert harness.log == scenario.expected


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_channel_stays_blocked_after_the_sequence(name: str) -> None:
    scenario = SCENARIOS[name]
    harness = Harness(scenario.num_channels)
    harness.run(scenario.steps)
    gate = harness.gate
    assert gate.blocked_channels == ()
    assert not any(harness.handler.is_blocked(c) for c in range(scenario.num_channels))
    assert all(len(channel) == 0 for channel in harness.channels)  # nothing left unread
    # every channel that has not ended can be read again
    open_channels = [c for c in range(scenario.num_channels) if (c, END_OF_PARTITION) not in scenario.steps]
    before = len(harness.log)
    for c in open_channels:
        harness.channels[c].push(f"probe-{c}")
    harness.drain()
    assert sorted(harness.log[before:]) == sorted(record(c, f"probe-{c}") for c in open_channels)


def test_repeated_barrier_on_a_kept_channel_is_stream_corrupt_and_resumes_nothing() -> None:
    # Seed (onBarrier): a barrier of the current checkpoint on a channel that is already blocked means
    # the stream is corrupt; it throws before any release, so nothing is resumed and the task fails.
    harness = Harness(2)
    harness.feed(0, barrier(1))
    assert harness.log == [block(0)]
    # the gate cannot read channel 0 again; only a second reader of the same channel could deliver it
    with pytest.raises(StreamCorruptError, match="repeated barrier for checkpoint 1 on input channel 0"):
        harness.handler.process_barrier(barrier(1), 0)
    assert harness.log == [block(0)]
    assert harness.gate.blocked_channels == (0,)
    assert harness.handler.is_blocked(0)


def test_repeated_barrier_directly_on_the_aligner_reports_no_resume() -> None:
    resumed: list[int] = []
    aligner = CheckpointBarrierAligner(2, SequenceListener([]))
    aligner.add_resume_listener(resumed.append)
    aligner.process_barrier(barrier(7), 1)
    with pytest.raises(StreamCorruptError):
        aligner.process_barrier(barrier(7), 1)
    assert resumed == []
    assert aligner.is_blocked(1)


def test_aligner_resumes_only_channels_it_does_not_keep() -> None:
    # handler-level view of the same branches, without a gate: what the aligner resumes, in order
    resumed: list[int] = []
    aligner = CheckpointBarrierAligner(3, SequenceListener([]))
    aligner.add_resume_listener(resumed.append)
    aligner.process_barrier(barrier(2), 1)  # kept
    aligner.process_barrier(barrier(1), 0)  # stale while aligning: resumed
    assert resumed == [0]
    aligner.process_barrier(barrier(2), 2)  # kept
    aligner.process_barrier(barrier(2), 0)  # completes: all kept channels resumed, in channel order
    assert resumed == [0, 0, 1, 2]


def test_resume_of_a_channel_the_handler_still_keeps_is_refused() -> None:
    # the seed checks on every poll that the polled channel is not blocked by the handler; the gate
    # makes that check where a channel becomes pollable again: at its resume
    harness = Harness(2)
    harness.feed(0, barrier(1))
    with pytest.raises(RuntimeError, match="channel 0 was resumed while the barrier handler still holds it"):
        harness.gate.resume_consumption(0)
    assert harness.gate.blocked_channels == (0,)


def test_a_resume_from_outside_poll_next_makes_the_channel_readable() -> None:
    # the alternating handler aborts a pending alignment from outside the aligner's process_barrier
    harness = Harness(2)
    harness.feed(0, barrier(3))
    harness.feed(0, "after")  # waits behind the block
    harness.feed(1, "b")
    aligner = harness.handler
    aligner.abort_pending_checkpoint(4, SUBSUMED)
    assert harness.gate.blocked_channels == ()
    harness.drain()
    assert harness.log == [block(0), record(1, "b"), resume(0), abort(3, SUBSUMED), record(0, "after")]


def test_alternating_savepoint_blocks_and_is_resumed_checkpoint_never_blocks() -> None:
    harness = Harness(2, "alternating")
    harness.run([(0, barrier(1, savepoint=True)), (1, barrier(1, savepoint=True))])
    assert harness.log == [block(0), block(1), resume(0), resume(1), trigger(1)]
    del harness.log[:]
    harness.run([(0, barrier(2)), (1, barrier(2))])  # unaligned checkpoint: trigger at the first
    assert harness.log == [trigger(2)]


def test_alternating_switch_to_unaligned_resumes_the_pending_savepoint_alignment() -> None:
    harness = Harness(2, "alternating")
    harness.run([(0, barrier(3, savepoint=True)), (0, "after"), (1, barrier(4))])
    # the aligner's pending savepoint is aborted when a newer checkpoint goes to the unaligner
    assert harness.log == [block(0), resume(0), abort(3, SUBSUMED), trigger(4), record(0, "after")]
    assert harness.gate.blocked_channels == ()


def test_alternating_resumes_a_stale_savepoint_barrier_it_drops() -> None:
    harness = Harness(2, "alternating")
    harness.run([(0, barrier(5)), (1, barrier(4, savepoint=True)), (1, "r")])
    assert harness.log == [trigger(5), block(1), resume(1), record(1, "r")]


@pytest.mark.parametrize("kind", ["tracker", "unaligner"])
def test_tracker_and_unaligner_never_block_nor_resume(kind: str) -> None:
    # Seed: the tracker does nothing with the barrier's channel; the unaligner does not align
    resumed: list[int] = []
    harness = Harness(2, kind)
    harness.handler.add_resume_listener(resumed.append)
    harness.run(
        [(0, barrier(1)), (0, "a"), (1, barrier(1)), (1, CancelCheckpointMarker(2)), (0, END_OF_PARTITION)]
    )
    assert not [e for e in harness.log if e[0] in ("block", "resume")]
    assert resumed == []
    assert not harness.handler.blocks_on_barrier(barrier(1))


def test_gate_and_handler_are_freed_without_the_garbage_collector() -> None:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        handler = CheckpointBarrierAligner(1, SequenceListener([]))
        gate = CheckpointedInputGate([ScriptedChannel()], handler)
        gate_ref = weakref.ref(gate)
        del gate
        assert gate_ref() is None  # no reference cycle through the resume listener
        handler.process_barrier(barrier(1), 0)  # a resume with no gate left is harmless
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------------- any interleaving


@st.composite
def scripts(draw: st.DrawFn) -> tuple[list[list[object]], list[int]]:
    """Channels of records, barriers (savepoint or checkpoint per id), markers, skips; and a schedule."""
    num_channels = draw(st.integers(1, 4))
    num_checkpoints = draw(st.integers(0, 4))
    savepoint = [draw(st.booleans()) for _ in range(num_checkpoints + 1)]
    channels: list[list[object]] = []
    for c in range(num_channels):
        items: list[object] = []
        for checkpoint_id in range(1, draw(st.integers(0, num_checkpoints)) + 1):
            items.extend(f"r{c}.{checkpoint_id}.{i}" for i in range(draw(st.integers(0, 2))))
            kind = draw(st.sampled_from(["barrier"] * 4 + ["cancel", "skip"]))
            if kind == "barrier":
                items.append(barrier(checkpoint_id, savepoint=savepoint[checkpoint_id]))
            elif kind == "cancel":
                items.append(CancelCheckpointMarker(checkpoint_id))
        items.extend(f"r{c}.end.{i}" for i in range(draw(st.integers(0, 2))))
        items.append(END_OF_PARTITION)
        channels.append(items)
    total = sum(len(items) for items in channels)
    schedule = draw(st.lists(st.integers(-1, num_channels - 1), max_size=2 * total))
    return channels, schedule


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(HANDLERS), scripts())
def test_any_interleaving_blocks_each_aligned_barrier_once_and_resumes_every_channel(
    kind: str, script: tuple[list[list[object]], list[int]]
) -> None:
    channels_items, schedule = script
    num_channels = len(channels_items)
    harness = Harness(num_channels, kind)
    gate, handler = harness.gate, harness.handler
    blocking_barriers = 0

    def poll_once() -> bool:
        nonlocal blocking_barriers
        polled = gate.poll_next()
        if polled is None:
            return False
        if isinstance(polled.item, CheckpointBarrier) and handler.blocks_on_barrier(polled.item):
            blocking_barriers += 1
        # the gate's block and the handler's agree after every poll
        for c in range(num_channels):
            assert gate.is_blocked(c) == handler.is_blocked(c), (c, harness.log)
        return True

    cursors = [0] * num_channels
    for step in schedule:
        if step == -1:
            poll_once()
        elif cursors[step] < len(channels_items[step]):
            harness.channels[step].push(channels_items[step][cursors[step]])
            cursors[step] += 1
    for c, items in enumerate(channels_items):
        harness.channels[c].push(*items[cursors[c] :])
    for _ in range(10_000):
        if not poll_once():
            break

    assert gate.is_finished()
    assert gate.blocked_channels == ()
    consumption = [e for e in harness.log if e[0] in ("block", "resume")]
    # per channel: block, resume, block, resume, ... -- never a resume without a block, never twice
    for c in range(num_channels):
        kinds = [e[0] for e in consumption if e[1] == c]
        assert kinds == ["block", "resume"] * (len(kinds) // 2), (c, harness.log)
    assert sum(1 for e in consumption if e[0] == "block") == blocking_barriers
    if kind in ("tracker", "unaligner"):
        assert consumption == []
