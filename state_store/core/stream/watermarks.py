"""Watermark propagation: the per-channel valve and the N-input combination (Flink 1.11).

:class:`StatusWatermarkValve` sits between a subtask's channels and its operator. For each channel it
keeps the last watermark, the stream status and an *aligned* flag::

    channel   watermark  status   aligned        output watermark = min over aligned channels
    0         120        ACTIVE   yes    --.
    1         100        ACTIVE   yes    --+--> min(120, 100) = 100  (emitted only if it advances)
    2          40        IDLE     no       '     (idle: ignored)
    3          70        ACTIVE   no             (back from idle, behind 100: ignored until >= 100)

Watermark *w* on channel *c* (ignored if *c* or the whole valve is idle, or *w* is not above *c*'s
last watermark):

1. Record *w* for *c*.
2. If *c* was unaligned and *w* >= the last output watermark, *c* is aligned again.
3. Emit the min over aligned channels if there is one and it is above the last output.

Status on channel *c*:

* ACTIVE -> IDLE: *c* becomes unaligned. If now every channel is idle, emit the max watermark over
  all channels (flush; only needed if *c* held the last output watermark) and then emit IDLE.
  Otherwise, if *c* held the last output watermark, emit the new min over aligned channels.
* IDLE -> ACTIVE: *c* is aligned again if its watermark is not behind the last output; if the valve
  was idle, emit ACTIVE.

Invariants: the output watermark never decreases; every aligned channel is active and its watermark
is >= the last output watermark.

:class:`InputWatermarkCombiner` is ``AbstractStreamOperatorV2.reportWatermark``: an operator with
N logical inputs (each behind its own valve) processes min(input watermarks), only when it advances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from state_store.core.stream.events import MIN_TIMESTAMP, StreamStatus, Watermark


@runtime_checkable
class ValveOutput(Protocol):
    """Where the valve sends what the operator should see (Flink's ``DataOutput``)."""

    def emit_watermark(self, watermark: Watermark) -> None: ...

    def emit_stream_status(self, status: StreamStatus) -> None: ...


@dataclass(frozen=True, slots=True)
class InputChannelStatus:
    """A snapshot of one channel inside the valve (for inspection and tests)."""

    watermark: int
    stream_status: StreamStatus
    is_watermark_aligned: bool


class StatusWatermarkValve:
    """Combines per-channel watermarks and stream statuses into one output (module docstring)."""

    __slots__ = ("_active", "_aligned", "_last_output_watermark", "_output", "_valve_active", "_watermarks")

    def __init__(self, num_channels: int, output: ValveOutput) -> None:
        if num_channels < 1:
            raise ValueError(f"a watermark valve needs at least one input channel, got {num_channels}")
        self._output = output
        self._watermarks = [MIN_TIMESTAMP] * num_channels
        self._active = [True] * num_channels
        self._aligned = [True] * num_channels
        self._last_output_watermark = MIN_TIMESTAMP
        self._valve_active = True

    # ------------------------------------------------------------------ inputs
    def input_watermark(self, watermark: Watermark, channel: int) -> None:
        """Feed a watermark of ``channel``; may emit a new output watermark."""
        if not (self._valve_active and self._active[channel]):
            return  # idle channel, or all channels idle
        timestamp = watermark.timestamp
        if timestamp <= self._watermarks[channel]:
            return  # not above this channel's last watermark
        self._watermarks[channel] = timestamp
        if not self._aligned[channel] and timestamp >= self._last_output_watermark:
            self._aligned[channel] = True
        self._find_and_output_new_min_watermark_across_aligned_channels()

    def input_stream_status(self, status: StreamStatus, channel: int) -> None:
        """Feed a status of ``channel``; may emit a watermark and/or a new output status."""
        if status is StreamStatus.IDLE and self._active[channel]:
            self._active[channel] = False
            self._aligned[channel] = False
            held_min = self._watermarks[channel] == self._last_output_watermark
            if not any(self._active):
                # every channel is idle: no watermark will advance any more, so flush to the max
                if held_min:
                    self._find_and_output_max_watermark_across_all_channels()
                self._valve_active = False
                self._output.emit_stream_status(StreamStatus.IDLE)
            elif held_min:
                self._find_and_output_new_min_watermark_across_aligned_channels()
        elif status is StreamStatus.ACTIVE and not self._active[channel]:
            self._active[channel] = True
            if self._watermarks[channel] >= self._last_output_watermark:
                self._aligned[channel] = True
            if not self._valve_active:
                self._valve_active = True
                self._output.emit_stream_status(StreamStatus.ACTIVE)

    def input(self, item: Watermark | StreamStatus, channel: int) -> None:
        """Feed either kind of time event."""
        if isinstance(item, Watermark):
            self.input_watermark(item, channel)
        else:
            self.input_stream_status(item, channel)

    # ------------------------------------------------------------------ outputs
    def _find_and_output_new_min_watermark_across_aligned_channels(self) -> None:
        aligned = self._aligned
        watermarks = self._watermarks
        candidates = [watermarks[c] for c in range(len(watermarks)) if aligned[c]]
        if candidates:
            new_min = min(candidates)
            if new_min > self._last_output_watermark:
                self._last_output_watermark = new_min
                self._output.emit_watermark(Watermark(new_min))

    def _find_and_output_max_watermark_across_all_channels(self) -> None:
        max_watermark = max(self._watermarks)
        if max_watermark > self._last_output_watermark:
            self._last_output_watermark = max_watermark
            self._output.emit_watermark(Watermark(max_watermark))

    # ------------------------------------------------------------------ inspection
    @property
    def num_channels(self) -> int:
        return len(self._watermarks)

    @property
    def last_output_watermark(self) -> int:
        return self._last_output_watermark

    @property
    def last_output_stream_status(self) -> StreamStatus:
        return StreamStatus.ACTIVE if self._valve_active else StreamStatus.IDLE

    def input_channel_status(self, channel: int) -> InputChannelStatus:
        if not 0 <= channel < len(self._watermarks):
            raise IndexError(
                f"invalid channel index {channel}: the valve has {len(self._watermarks)} channels"
            )
        return InputChannelStatus(
            watermark=self._watermarks[channel],
            stream_status=StreamStatus.ACTIVE if self._active[channel] else StreamStatus.IDLE,
            is_watermark_aligned=self._aligned[channel],
        )


class InputWatermarkCombiner:
    """The combined watermark of an operator with N inputs (``AbstractStreamOperatorV2.reportWatermark``).

    Inputs are indexed ``0 .. N-1`` (Flink's ``inputId`` is 1-based). Each input starts at
    :data:`MIN_TIMESTAMP`, so nothing is emitted until every input reported a watermark.
    Invariant: the combined watermark never decreases.
    """

    __slots__ = ("_combined", "_inputs")

    def __init__(self, num_inputs: int) -> None:
        if num_inputs < 1:
            raise ValueError(f"an operator needs at least one input, got {num_inputs}")
        self._inputs = [MIN_TIMESTAMP] * num_inputs
        self._combined = MIN_TIMESTAMP

    def report_watermark(self, watermark: Watermark, input_index: int) -> Watermark | None:
        """Record ``watermark`` for an input; return the new combined watermark if it advanced."""
        self._inputs[input_index] = watermark.timestamp
        new_min = min(self._inputs)
        if new_min > self._combined:
            self._combined = new_min
            return Watermark(new_min)
        return None

    @property
    def combined_watermark(self) -> int:
        return self._combined

    @property
    def input_watermarks(self) -> tuple[int, ...]:
        return tuple(self._inputs)
