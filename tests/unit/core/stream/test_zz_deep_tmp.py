"""Property tests: any interleaving of channels keeps the barrier, watermark and timer invariants."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.stream import (
    END_OF_PARTITION,
    MIN_TIMESTAMP,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointBarrierAligner,
    CheckpointBarrierTracker,
    CheckpointBarrierUnaligner,
    CheckpointedInputGate,
    InternalTimer,
    ScriptedChannel,
    StatusWatermarkValve,
    StreamStatus,
    TimerService,
    Watermark,
)

from .support import RecordingChannelState, RecordingListener, RecordingValveOutput, Triggered

PROPERTY_SETTINGS = settings(max_examples=3000, deadline=None)


@dataclass(frozen=True)
class Rec:
    """A record of ``epoch`` on ``channel``: epoch n lies between barrier n-1 and barrier n."""

    channel: int
    epoch: int
    seq: int


@dataclass(frozen=True)
class Script:
    """What each channel will carry, and the order in which items become available."""

    channels: list[list[object]]
    schedule: list[int]  # a channel index: make its next item available; -1: poll the gate once
    num_checkpoints: int


@st.composite
def scripts(draw: st.DrawFn, allow_skips: bool = False) -> Script:
    num_channels = draw(st.integers(1, 4))
    num_checkpoints = draw(st.integers(0, 4))
    channels: list[list[object]] = []
    for c in range(num_channels):
        ends_after = draw(st.integers(0, num_checkpoints))  # barriers this channel delivers before ending
        items: list[object] = []
        seq = 0
        last_marker = 0  # a record belongs to the epoch after the last barrier/marker before it
        for epoch in range(1, ends_after + 2):
            for _ in range(draw(st.integers(0, 3))):
                items.append(Rec(c, last_marker + 1, seq))
                seq += 1
            if epoch <= ends_after:
                # mostly a barrier; sometimes the upstream declined (a cancellation marker instead),
                # or (allow_skips) its barrier never arrives, so a newer barrier subsumes the checkpoint
                kind = draw(st.sampled_from(["barrier"] * 6 + ["cancel"] + (["skip"] if allow_skips else [])))
                if kind == "barrier":
                    items.append(CheckpointBarrier(epoch))
                elif kind == "cancel":
                    items.append(CancelCheckpointMarker(epoch))
                if kind != "skip":
                    last_marker = epoch
        items.append(END_OF_PARTITION)
        channels.append(items)
    total = sum(len(items) for items in channels)
    schedule = draw(st.lists(st.integers(-1, num_channels - 1), max_size=3 * total))
    return Script(channels, schedule, num_checkpoints)


@dataclass
class Run:
    """Everything observed while driving a gate through a script."""

    polled: list[tuple[int, object]]
    outcomes_at: list[int]  # len(listener.events) after each poll


def drive(script: Script, gate: CheckpointedInputGate, channels: list[ScriptedChannel], check: object) -> Run:
    """Feed items as the schedule says, poll when told, then feed the rest and drain; call ``check``."""
    cursors = [0] * len(channels)
    run = Run([], [])

    def poll_once() -> bool:
        polled = gate.poll_next()
        if polled is None:
            return False
        run.polled.append((polled.channel, polled.item))
        check(polled.channel, polled.item)  # type: ignore[operator]
        return True

    for step in script.schedule:
        if step == -1:
            poll_once()
        elif cursors[step] < len(script.channels[step]):
            channels[step].push(script.channels[step][cursors[step]])
            cursors[step] += 1
    for c, items in enumerate(script.channels):
        channels[c].push(*items[cursors[c] :])
    for _ in range(10_000):
        if not poll_once():
            break
    return run


class ObservedChannel(ScriptedChannel):
    """A scripted channel that logs what the gate polls, including the markers the gate swallows."""

    def __init__(self, channel: int, log: list[tuple[int, object]]) -> None:
        super().__init__()
        self._channel = channel
        self._log = log

    def poll(self) -> object | None:
        item = super().poll()
        if item is not None:
            self._log.append((self._channel, item))
        return item


class AlignedOracle:
    """Checks the exactly-once invariants after every item the gate hands out.

    * At the trigger of *n* the records handed out are exactly those before barrier *n* on every
      channel (epoch <= n): nothing of a later epoch, nothing of an earlier one missing.
    * A checkpoint with every live channel past its barrier, and no newer checkpoint started or
      cancelled, has been triggered or aborted (alignment never waits longer than needed).
    """

    def __init__(self, script: Script, listener: RecordingListener, log: list[tuple[int, object]]) -> None:
        self.listener = listener
        self.log = log
        self.closed = [False] * len(script.channels)
        self.handed_out: set[Rec] = set()
        self.records = [item for items in script.channels for item in items if isinstance(item, Rec)]
        self.seen_events = 0

    def __call__(self, channel: int, item: object) -> None:
        if isinstance(item, Rec):
            self.handed_out.add(item)
        elif item is END_OF_PARTITION:
            self.closed[channel] = True
        for event in self.listener.events[self.seen_events :]:
            if isinstance(event, Triggered):
                n = event.checkpoint_id
                expected = {r for r in self.records if r.epoch <= n}
                assert self.handed_out == expected, f"checkpoint {n} is not an exact cut"
        self.seen_events = len(self.listener.events)

        resolved = {e.checkpoint_id for e in self.listener.events}
        barriers: list[set[int]] = [set() for _ in self.closed]
        newest_control = -1
        for c, polled in self.log:
            if isinstance(polled, CheckpointBarrier | CancelCheckpointMarker):
                newest_control = max(newest_control, polled.checkpoint_id)
                if isinstance(polled, CheckpointBarrier):
                    barriers[c].add(polled.checkpoint_id)
        live = [c for c in range(len(self.closed)) if not self.closed[c]]
        for n in set().union(*barriers) if barriers else set():
            if live and n == newest_control and n not in resolved and all(n in barriers[c] for c in live):
                raise AssertionError(f"every live channel delivered barrier {n} but it was not triggered")


def assert_records_exactly_once_in_channel_order(script: Script, polled: list[tuple[int, object]]) -> None:
    for c, items in enumerate(script.channels):
        expected = [i for i in items if isinstance(i, Rec)]
        got = [item for channel, item in polled if channel == c and isinstance(item, Rec)]
        assert got == expected


def assert_one_outcome_per_checkpoint(script: Script, listener: RecordingListener) -> None:
    ids = {
        item.checkpoint_id
        for items in script.channels
        for item in items
        if isinstance(item, CheckpointBarrier | CancelCheckpointMarker)
    }
    outcomes = [e.checkpoint_id for e in listener.events]
    assert sorted(outcomes) == sorted(ids), listener.events
    assert listener.triggered == sorted(listener.triggered)


@PROPERTY_SETTINGS
@given(scripts())
def test_aligner_any_interleaving_delivers_every_record_once_and_triggers_at_full_alignment(
    script: Script,
) -> None:
    listener = RecordingListener()
    log: list[tuple[int, object]] = []
    channels: list[ScriptedChannel] = [ObservedChannel(c, log) for c in range(len(script.channels))]
    gate = CheckpointedInputGate(channels, CheckpointBarrierAligner(len(channels), listener))
    run = drive(script, gate, channels, AlignedOracle(script, listener, log))
    assert gate.is_finished()
    assert_records_exactly_once_in_channel_order(script, run.polled)
    assert_one_outcome_per_checkpoint(script, listener)


@PROPERTY_SETTINGS
@given(scripts(allow_skips=True))
def test_aligner_with_missing_barriers_keeps_exact_cuts_and_decides_each_checkpoint_at_most_once(
    script: Script,
) -> None:
    listener = RecordingListener()
    log: list[tuple[int, object]] = []
    channels: list[ScriptedChannel] = [ObservedChannel(c, log) for c in range(len(script.channels))]
    gate = CheckpointedInputGate(channels, CheckpointBarrierAligner(len(channels), listener))
    run = drive(script, gate, channels, AlignedOracle(script, listener, log))
    assert gate.is_finished()
    assert_records_exactly_once_in_channel_order(script, run.polled)
    decided = [e.checkpoint_id for e in listener.events]
    assert len(decided) == len(set(decided)), listener.events
    assert listener.triggered == sorted(listener.triggered)


@PROPERTY_SETTINGS
@given(scripts())
def test_tracker_any_interleaving_delivers_every_record_once_and_triggers_only_complete_checkpoints(
    script: Script,
) -> None:
    listener = RecordingListener()
    channels = [ScriptedChannel() for _ in script.channels]
    gate = CheckpointedInputGate(channels, CheckpointBarrierTracker(len(channels), listener))
    barriers_seen: list[set[int]] = [set() for _ in channels]
    closed = [False] * len(channels)

    def check(channel: int, item: object) -> None:
        if isinstance(item, CheckpointBarrier):
            barriers_seen[channel].add(item.checkpoint_id)
        if item is END_OF_PARTITION:
            closed[channel] = True
        for n in listener.triggered:
            assert all(n in barriers_seen[c] for c in range(len(channels)) if not closed[c])

    run = drive(script, gate, channels, check)
    assert gate.is_finished()
    assert_records_exactly_once_in_channel_order(script, run.polled)
    assert len(set(listener.triggered)) == len(listener.triggered)
    assert not any(gate.is_blocked(c) for c in range(len(channels)))


@PROPERTY_SETTINGS
@given(scripts())
def test_unaligner_channel_state_is_exactly_the_records_overtaken_by_the_first_barrier(
    script: Script,
) -> None:
    listener = RecordingListener()
    writer = RecordingChannelState()
    channels = [ScriptedChannel() for _ in script.channels]
    gate = CheckpointedInputGate(
        channels, CheckpointBarrierUnaligner(len(channels), listener, channel_state_writer=writer)
    )
    trigger_at: dict[int, int] = {}  # checkpoint -> number of items handed out up to its trigger
    handed_out = 0

    def check(channel: int, item: object) -> None:
        nonlocal handed_out
        handed_out += 1
        for n in listener.triggered:
            trigger_at.setdefault(n, handed_out)
        assert not gate.is_blocked(channel)

    run = drive(script, gate, channels, check)
    assert_records_exactly_once_in_channel_order(script, run.polled)
    assert listener.triggered == sorted(set(listener.triggered))
    for n, position in trigger_at.items():
        if n in writer.finished:
            # complete: its channel state is every record before barrier n handed out after the trigger
            # (epoch <= n: records of an older, subsumed checkpoint are in flight for n too)
            expected = [
                (channel, item)
                for channel, item in run.polled[position:]
                if isinstance(item, Rec) and item.epoch <= n
            ]
            assert writer.data.get(n, []) == expected
            assert n not in {m for m, _ in listener.aborted}
        else:
            # abandoned: aborted itself, or dropped by the cancellation of a newer checkpoint (as in Flink)
            assert any(m >= n for m, _ in listener.aborted), (n, listener.events)


valve_ops = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.one_of(
            st.integers(0, 30).map(Watermark), st.sampled_from([StreamStatus.IDLE, StreamStatus.ACTIVE])
        ),
    ),
    max_size=60,
)


@settings(max_examples=5000, deadline=None)
@given(st.integers(1, 4), valve_ops)
def test_valve_output_never_decreases_and_is_the_min_over_aligned_channels(
    num_channels: int, ops: list[tuple[int, Watermark | StreamStatus]]
) -> None:
    output = RecordingValveOutput()
    valve = StatusWatermarkValve(num_channels, output)
    for channel, event in ops:
        channel %= num_channels
        before = valve.input_channel_status(channel)
        valve.input(event, channel)
        # the valve recomputes the min after an accepted watermark (and when an idle channel held it)
        recomputed = isinstance(event, Watermark) and valve.input_channel_status(channel) != before
        marks = output.watermarks
        assert all(a < b for a, b in itertools.pairwise(marks)), marks
        assert valve.last_output_watermark == (marks[-1] if marks else MIN_TIMESTAMP)
        statuses = [s for s in output.emitted if isinstance(s, StreamStatus)]
        assert statuses == [StreamStatus.IDLE, StreamStatus.ACTIVE] * (len(statuses) // 2) + (
            [StreamStatus.IDLE] if len(statuses) % 2 else []
        )
        states = [valve.input_channel_status(c) for c in range(num_channels)]
        all_idle = all(s.stream_status is StreamStatus.IDLE for s in states)
        assert valve.last_output_stream_status is (StreamStatus.IDLE if all_idle else StreamStatus.ACTIVE)
        aligned = [s.watermark for s in states if s.is_watermark_aligned]
        assert all(s.stream_status is StreamStatus.ACTIVE for s in states if s.is_watermark_aligned)
        if aligned:
            # no aligned channel is behind the output; right after a recomputation the output is their min.
            # (After IDLE -> ACTIVE Flink does not recompute: the output catches up on the next watermark.)
            assert valve.last_output_watermark <= min(aligned)
            if recomputed:
                assert valve.last_output_watermark == min(aligned)


timer_ops = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from("abc"), st.sampled_from("xy"), st.integers(0, 40)),
        st.tuples(st.just("delete"), st.sampled_from("abc"), st.sampled_from("xy"), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.just(""), st.just(""), st.integers(0, 50)),
    ),
    max_size=60,
)


class Target:
    def __init__(self) -> None:
        self.fired: list[tuple[int, str, str]] = []

    def on_event_time(self, timer: InternalTimer[str, str]) -> None:
        self.fired.append((timer.timestamp, timer.key, timer.namespace))

    def on_processing_time(self, timer: InternalTimer[str, str]) -> None:
        raise AssertionError("no processing-time timer was registered")


@PROPERTY_SETTINGS
@given(timer_ops)
def test_timers_fire_exactly_once_in_order(ops: list[tuple[str, str, str, int]]) -> None:
    target = Target()
    timers: TimerService[str, str] = TimerService(target, lambda key: ord(key) % 2)
    model: set[tuple[int, str, str]] = set()
    for op, key, namespace, ts in ops:
        if op == "register":
            assert timers.register_event_time_timer(key, namespace, ts) == ((ts, key, namespace) not in model)
            model.add((ts, key, namespace))
        elif op == "delete":
            assert timers.delete_event_time_timer(key, namespace, ts) == ((ts, key, namespace) in model)
            model.discard((ts, key, namespace))
        else:
            before = len(target.fired)
            timers.advance_watermark(ts)
            due = sorted(t for t in model if t[0] <= ts)
            assert target.fired[before:] == due
            model -= set(due)
        assert timers.num_event_time_timers() == len(model)
    snapshot = timers.snapshot()
    restored_target = Target()
    restored: TimerService[str, str] = TimerService(restored_target, lambda key: ord(key) % 2)
    restored.restore(snapshot)
    restored.advance_watermark(10_000)
    assert restored_target.fired == sorted(model)  # the snapshot holds exactly the unfired timers
