"""Choosing the barrier handler from the job's checkpointing mode (Flink 1.11 ``InputProcessorUtil``).

=====================  ==========  ===========================================================
mode                   unaligned   handler
=====================  ==========  ===========================================================
``exactly_once``       no          :class:`CheckpointBarrierAligner`
``exactly_once``       yes         :class:`AlternatingCheckpointBarrierHandler` (unaligner for
                                   checkpoints, aligner for savepoints)
``at_least_once``      no          :class:`CheckpointBarrierTracker`
``at_least_once``      yes         error: unaligned checkpoints need exactly-once
=====================  ==========  ===========================================================

The job configuration spells the second row ``unaligned``; :func:`parse_checkpointing_mode` maps the
three spellings (``exactly_once``, ``at_least_once``, ``unaligned``) to a mode and a flag.
"""

from __future__ import annotations

import enum

from state_store.core.stream.aligner import CheckpointBarrierAligner
from state_store.core.stream.alternating import AlternatingCheckpointBarrierHandler
from state_store.core.stream.handler import (
    ChannelStateWriter,
    CheckpointBarrierHandler,
    CheckpointBarrierListener,
    TimeSource,
    zero_time,
)
from state_store.core.stream.tracker import MAX_CHECKPOINTS_TO_TRACK, CheckpointBarrierTracker
from state_store.core.stream.unaligner import CheckpointBarrierUnaligner


class CheckpointingMode(enum.Enum):
    """The processing guarantee of a job (Flink's ``CheckpointingMode``)."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


_SPELLINGS = {
    "exactly_once": (CheckpointingMode.EXACTLY_ONCE, False),
    "at_least_once": (CheckpointingMode.AT_LEAST_ONCE, False),
    "unaligned": (CheckpointingMode.EXACTLY_ONCE, True),
}


def parse_checkpointing_mode(text: str) -> tuple[CheckpointingMode, bool]:
    """Map a configured mode to ``(mode, unaligned)``; raise ValueError naming the valid spellings."""
    key = text.strip().lower().replace("-", "_")
    try:
        return _SPELLINGS[key]
    except KeyError:
        raise ValueError(
            f"unknown checkpointing mode {text!r}: use one of 'exactly_once' (default), "
            "'at_least_once' or 'unaligned'"
        ) from None


def create_barrier_handler(
    mode: CheckpointingMode | str,
    num_channels: int,
    listener: CheckpointBarrierListener,
    *,
    unaligned: bool = False,
    channel_state_writer: ChannelStateWriter | None = None,
    max_tracked_checkpoints: int = MAX_CHECKPOINTS_TO_TRACK,
    now_ns: TimeSource = zero_time,
    now_ms: TimeSource = zero_time,
) -> CheckpointBarrierHandler:
    """Build the handler for ``mode`` over ``num_channels`` channels (see the module table).

    ``mode`` may be a :class:`CheckpointingMode` or one of the configured spellings; the spelling
    ``"unaligned"`` implies ``unaligned=True``. Raises ValueError for ``at_least_once`` with
    unaligned checkpoints, which cannot work: unaligned checkpoints persist the records a barrier
    overtook, and only exactly-once mode has a cut to persist them against.
    """
    if isinstance(mode, str):
        mode, from_text = parse_checkpointing_mode(mode)
        unaligned = unaligned or from_text
    if mode is CheckpointingMode.EXACTLY_ONCE:
        aligner = CheckpointBarrierAligner(num_channels, listener, now_ns=now_ns, now_ms=now_ms)
        if not unaligned:
            return aligner
        unaligner = CheckpointBarrierUnaligner(
            num_channels, listener, channel_state_writer=channel_state_writer, now_ns=now_ns, now_ms=now_ms
        )
        return AlternatingCheckpointBarrierHandler(aligner, unaligner)
    if unaligned:
        raise ValueError(
            "cannot use unaligned checkpoints with at_least_once checkpointing mode: set the mode to "
            "'unaligned' (exactly-once with unaligned checkpoints) or 'exactly_once', or turn "
            "unaligned checkpoints off"
        )
    return CheckpointBarrierTracker(
        num_channels, listener, max_tracked_checkpoints=max_tracked_checkpoints, now_ns=now_ns, now_ms=now_ms
    )
