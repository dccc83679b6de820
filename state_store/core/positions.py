"""A checkpoint's barrier positions, as a typed value over the ``positions`` object its
``_pending.json`` and ``_metadata.json`` carry (the stored JSON is unchanged).

* ``ranges`` -- per source partition (``<source uid>/<partition>``), the offsets ``[start, end)``
  the epoch consumes; ``end`` is where the next epoch starts.
* ``base`` -- the chain head this checkpoint continues (its state and positions), ``None`` for the
  first checkpoint of a job and for a restore's import.
* ``restored_from`` -- set on a restore's import only: the snapshot it imported.
* ``follow_up`` -- set on a restore's import only: what the restore does after its commit point
  (:class:`RestoreFollowUp`), rolled forward by the next holder of the job if the restore died.

Invariants: ``start <= end`` for every range; an import (``restored_from`` set) has no ``base``.
Keys this value does not know are kept as they are (``extra``), so a document written by another
component round-trips unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state_store.core.codec import ManifestError, is_int

_KNOWN = ("ranges", "base", "restored_from", "restore_follow_up")


@dataclass(frozen=True, slots=True)
class RestoreFollowUp:
    """A restore's steps after its commit: retract sink output committed after ``retract_after``
    (a forced restore past a damaged head), pin checkpoint ``pin`` (a NO_CLAIM restore), and let
    the sinks whose policy asks for it (``on_rewind="overwrite"``) withdraw their output committed
    after ``rewound_to`` -- the checkpoint of this job whose cut the restored snapshot holds."""

    retract_after: int | None = None
    pin: int | None = None
    rewound_to: int | None = None


@dataclass(frozen=True, slots=True)
class BarrierPositions:
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    base: int | None = None
    restored_from: str | None = None
    follow_up: RestoreFollowUp | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_import(self) -> bool:
        return self.restored_from is not None

    def end(self, partition_key: str) -> int:
        """Where the next epoch starts reading ``partition_key`` (0 if this epoch did not read it)."""
        return self.ranges.get(partition_key, (0, 0))[1]

    def ends(self) -> dict[str, int]:
        return {k: end for k, (_, end) in self.ranges.items()}

    def to_json(self) -> dict[str, Any]:
        """The stored ``positions`` object (the same keys as before this type existed)."""
        out: dict[str, Any] = dict(self.extra)
        out["ranges"] = {k: [start, end] for k, (start, end) in self.ranges.items()}
        out["base"] = self.base
        if self.restored_from is not None:
            out["restored_from"] = self.restored_from
        if self.follow_up is not None:
            follow = self.follow_up
            out["restore_follow_up"] = {"retract_after": follow.retract_after, "pin": follow.pin}
            if follow.rewound_to is not None:  # absent in documents written before it existed
                out["restore_follow_up"]["rewound_to"] = follow.rewound_to
        return out

    @classmethod
    def of(cls, raw: Mapping[str, Any], *, what: str = "positions") -> BarrierPositions:
        """Parse a stored ``positions`` object; a malformed one is a :class:`ManifestError`."""
        ranges: dict[str, tuple[int, int]] = {}
        for key, value in dict(raw.get("ranges") or {}).items():
            if not (isinstance(value, list | tuple) and len(value) == 2 and all(is_int(v) for v in value)):
                raise ManifestError(f"{what}: range of {key!r} is {value!r}, not [start, end] offsets")
            start, end = int(value[0]), int(value[1])
            if start > end:
                raise ManifestError(f"{what}: range of {key!r} starts after it ends ({start} > {end})")
            ranges[str(key)] = (start, end)
        base = raw.get("base")
        if base is not None and not is_int(base):
            raise ManifestError(f"{what}: base {base!r} is not a checkpoint id")
        restored = raw.get("restored_from")
        follow = raw.get("restore_follow_up")
        follow_up = None
        if isinstance(follow, Mapping):
            retract, pin = follow.get("retract_after"), follow.get("pin")
            rewound = _int_or_none(follow.get("rewound_to"))
            follow_up = RestoreFollowUp(_int_or_none(retract), _int_or_none(pin), rewound)
        return cls(
            ranges,
            int(base) if base is not None else None,
            str(restored) if restored is not None else None,
            follow_up,
            {k: v for k, v in raw.items() if k not in _KNOWN},
        )


def _int_or_none(value: Any) -> int | None:
    return int(value) if is_int(value) else None
