"""The parts of a task's snapshot (``AckRecord.snapshot``, ``TaskSnapshot.snapshot``) as a typed
view; the stored JSON is unchanged. One task's snapshot holds the parts of its kind:

* a source subtask: ``source`` (:class:`SourcePart`: partition, next offset, highest event time)
  and ``dead_letters`` (count per reason);
* a stateful operator: ``state_files`` (per key group, the chain of files to read: decoded by
  ``spark_jobs.runtime.state_io``), ``timers`` (per key group) and ``extra`` (operator-specific);
* a sink: ``sink_transactions`` (pre-committed records: ``state_store.core.twophase``);
* the anchor of an unaligned checkpoint also: ``channel_state`` (the in-flight records' file).

Invariant: a snapshot has source parts, state parts or sink parts, never two of these kinds.
Unknown keys are kept (``other``) so a newer writer's parts round-trip unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state_store.core.codec import ManifestError, is_int

SOURCE = "source"
DEAD_LETTERS = "dead_letters"
STATE_FILES = "state_files"
TIMERS = "timers"
EXTRA = "extra"
SINK_TRANSACTIONS = "sink_transactions"
CHANNEL_STATE = "channel_state"
_KNOWN = (SOURCE, DEAD_LETTERS, STATE_FILES, TIMERS, EXTRA, SINK_TRANSACTIONS, CHANNEL_STATE)


@dataclass(frozen=True, slots=True)
class SourcePart:
    """Where a source partition stands after the epoch: ``position`` is the next offset to read,
    ``max_ts`` the highest event time seen (None before the first record: no watermark yet)."""

    partition: str
    position: int
    max_ts: int | None = None
    other: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.other, "partition": self.partition, "max_ts": self.max_ts, "position": self.position}


@dataclass(frozen=True, slots=True)
class TaskParts:
    source: SourcePart | None = None
    dead_letters: dict[str, int] | None = None
    state_files: dict[str, Any] | None = None
    timers: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    sink_transactions: list[Any] | None = None
    channel_state: dict[str, Any] | None = None
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def is_source(self) -> bool:
        return self.source is not None

    @property
    def is_sink(self) -> bool:
        return self.sink_transactions is not None

    def to_json(self) -> dict[str, Any]:
        out = dict(self.other)
        for key, value in (
            (SOURCE, self.source.to_json() if self.source is not None else None),
            (DEAD_LETTERS, self.dead_letters),
            (STATE_FILES, self.state_files),
            (TIMERS, self.timers),
            (EXTRA, self.extra),
            (SINK_TRANSACTIONS, self.sink_transactions),
            (CHANNEL_STATE, self.channel_state),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def of(cls, raw: Mapping[str, Any], *, what: str = "task snapshot") -> TaskParts:
        """Parse a stored snapshot; a part of the wrong JSON type is a :class:`ManifestError`."""
        source = raw.get(SOURCE)
        part = None
        if source is not None:
            source = _mapping(source, SOURCE, what)
            position, max_ts = source.get("position", 0), source.get("max_ts")
            if not is_int(position) or not (max_ts is None or is_int(max_ts)):
                raise ManifestError(f"{what}: source part {dict(source)!r} has no integer position/max_ts")
            rest = {k: v for k, v in source.items() if k not in ("partition", "position", "max_ts")}
            part = SourcePart(str(source.get("partition", "")), int(position), max_ts, rest)
        sinks = raw.get(SINK_TRANSACTIONS)
        if sinks is not None and not isinstance(sinks, list):
            raise ManifestError(f"{what}: {SINK_TRANSACTIONS!r} must be a list, got {sinks!r}")
        return cls(
            part,
            _optional(raw, DEAD_LETTERS, what),
            _optional(raw, STATE_FILES, what),
            _optional(raw, TIMERS, what),
            _optional(raw, EXTRA, what),
            sinks,
            _optional(raw, CHANNEL_STATE, what),
            {k: v for k, v in raw.items() if k not in _KNOWN},
        )


def _optional(raw: Mapping[str, Any], key: str, what: str) -> dict[str, Any] | None:
    value = raw.get(key)
    return None if value is None else dict(_mapping(value, key, what))


def _mapping(value: Any, key: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(f"{what}: part {key!r} must be an object, got {value!r}")
    return value
