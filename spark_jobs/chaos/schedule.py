"""Seeded fault schedules: which named fault fires in which epoch (tick) of a chaos run.

Invariants:

* ``generate(seed, ticks)`` is a pure function of its arguments: the same seed always gives the
  same schedule (so any failing schedule can be replayed with ``epochal chaos --seed S``).
* Every fault kind is a name in :data:`FAULT_KINDS`; every fault carries its own ``seed`` (it
  drives the fault's random choices: which keys, how many times, which interleaving).
* Faults that need a restore base (``kill_restore*``) are never placed in tick 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from state_store.core import killpoints

KILL_PREFIX = "kill:"
KILL_KINDS = tuple(KILL_PREFIX + point for point in killpoints.ALL)
STORAGE_KINDS = (
    "s3_500",
    "s3_503_slowdown",
    "s3_timeout",
    "s3_connection_reset",
    "s3_latency",
    "lost_response",
    "torn_manifest",
    "torn_state",
    "bitflip_state",
    "disk_full",
)
PROTOCOL_KINDS = (
    "kill_restore",
    "kill_restore_twice",
    "duplicate_ack",
    "late_ack",
    "zombie_attempt",
    "zombie_coordinator",
    "racing_coordinators",
    "gx_failure",
)
OPERATOR_KINDS = (
    "op_concurrent_runs",
    "op_restore_during_epoch",
    "op_savepoint_during_epoch",
    "op_retention_during_epoch",
    "op_backfill_into_the_job",
    "op_zombie_holder_restore",
    "op_dead_cli_holder",
    "op_airflow_restore_during_epoch",
    "op_double_trigger",
)
"""What operators do to a running job (issue 18): other commands at random points of an epoch,
holders that die or come back as zombies, a restore DAG run during an epoch DAG run."""
FAULT_KINDS = KILL_KINDS + STORAGE_KINDS + PROTOCOL_KINDS + OPERATOR_KINDS
NEEDS_BASE = frozenset({"kill_restore", "kill_restore_twice"})


class InvalidScheduleError(ValueError):
    """A schedule request that cannot be honoured (the message names the argument)."""


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """Fault ``kind`` armed during tick ``tick``; ``seed`` drives its own random choices."""

    tick: int
    kind: str
    seed: int

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise InvalidScheduleError(
                f"fault kind {self.kind!r} is unknown: use one of {', '.join(FAULT_KINDS)}"
            )


@dataclass(frozen=True, slots=True)
class Schedule:
    """One chaos run: ``ticks`` epochs with ``faults``; ``retry_bias`` is the chance that a failed
    task is retried inside the same DAG run (else the run fails and a new DAG run starts)."""

    seed: int
    ticks: int
    faults: tuple[FaultEvent, ...] = field(default=())
    retry_bias: float = 0.5

    def at(self, tick: int) -> tuple[FaultEvent, ...]:
        return tuple(f for f in self.faults if f.tick == tick)


def generate(
    seed: int,
    ticks: int = 2,
    *,
    max_faults: int = 3,
    kinds: tuple[str, ...] = FAULT_KINDS,
    include: str | None = None,
) -> Schedule:
    """A schedule of 1..``max_faults`` faults drawn from ``kinds`` over ``ticks`` epochs (the first
    one is ``include`` if given: a random schedule that certainly exercises that kind)."""
    if ticks < 2:
        raise InvalidScheduleError(f"ticks={ticks} is invalid: use >= 2 (restore faults need a base)")
    if max_faults < 1:
        raise InvalidScheduleError(f"max_faults={max_faults} is invalid: use >= 1")
    unknown = sorted(set(kinds) - set(FAULT_KINDS)) + (
        [include] if include and include not in FAULT_KINDS else []
    )
    if unknown or not kinds:
        raise InvalidScheduleError(
            f"fault kinds {unknown or '(none)'} are invalid: use {', '.join(FAULT_KINDS)}"
        )
    rng = random.Random(f"epochal-chaos-{seed}")
    faults = []
    for i in range(rng.randint(1, max_faults)):
        kind = include if include is not None and i == 0 else rng.choice(kinds)
        low = 1 if kind in NEEDS_BASE else 0
        faults.append(FaultEvent(rng.randint(low, ticks - 1), kind, rng.randrange(2**31)))
    faults.sort(key=lambda f: (f.tick, f.kind, f.seed))
    return Schedule(seed, ticks, tuple(faults), retry_bias=rng.choice((0.0, 0.5, 1.0)))


def randomized_suite(count: int, seed: int, ticks: int = 2) -> list[Schedule]:
    """``count`` random schedules; the first ``len(FAULT_KINDS)`` each certainly include one kind
    (so a suite of >= that many exercises every fault kind), the rest are unconstrained."""
    rng = random.Random(f"epochal-chaos-suite-{seed}")
    out = []
    for i in range(count):
        include = FAULT_KINDS[i] if i < len(FAULT_KINDS) else None
        out.append(generate(rng.randrange(2**31), ticks, include=include))
    return out
