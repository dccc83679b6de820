"""Kill switches for the protocol's named kill points (``state_store.core.killpoints``).

Production code calls ``kill(point, checkpoint_id)`` at every kill point; the switch is
:data:`~state_store.core.ports.NO_KILL` unless an operator asked for a fault. Only the entry points
(the CLI, ``run_epoch``, the Airflow hook) read the request from the environment, with
:func:`kill_switch_from_env`; below them the request travels as a :class:`KillSpec` value (in
``EpochPlan`` to every Spark task).

``EPOCHAL_FAULT=<point>[@<checkpoint_id>]`` selects one point (optionally only for one checkpoint).
``EPOCHAL_FAULT_MODE=raise`` (default) raises :class:`SimulatedCrash`, a ``BaseException`` so that
no ``except Exception`` in the code under test can swallow it; ``exit`` ends the process at once
with ``os._exit(137)`` (as a SIGKILL would: no cleanup, no flush); ``pause:<seconds>`` stops the
process there for that long and lets it go on (a stalled worker: a slow disk, a GC pause, a frozen
VM -- what turns a lease holder into a zombie, or keeps a job busy for a test).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from state_store.core import killpoints
from state_store.core.errors import BadInputError
from state_store.core.ports import NO_KILL, KillSwitch


class SimulatedCrash(BaseException):
    """Raised at a kill point: the process 'died' there."""

    def __init__(self, point: str, checkpoint_id: int | None) -> None:
        super().__init__(f"simulated crash at kill point {point!r} (checkpoint {checkpoint_id})")
        self.point = point
        self.checkpoint_id = checkpoint_id


class InvalidFaultSpec(ValueError, BadInputError):
    """An EPOCHAL_FAULT value that names no kill point."""


@dataclass(frozen=True)
class KillSpec:
    """Which kill point to fire, for which checkpoint (any if ``None``), and how.

    Invariant: ``point`` is one of ``killpoints.ALL`` and ``mode`` is ``raise``, ``exit`` or
    ``pause:<0..3600>`` (checked on construction). A value, so it can be shipped to Spark tasks; each
    task arms its own :class:`KillAt` from it.
    """

    point: str
    checkpoint_id: int | None = None
    mode: str = "raise"

    def __post_init__(self) -> None:
        if self.point not in killpoints.ALL:
            raise InvalidFaultSpec(
                f"kill point {self.point!r} does not exist: use one of {', '.join(killpoints.ALL)}"
            )
        pause = self.mode.removeprefix("pause:")
        if self.mode not in ("raise", "exit") and not (
            self.mode.startswith("pause:") and _seconds(pause) is not None
        ):
            raise InvalidFaultSpec(
                f"EPOCHAL_FAULT_MODE={self.mode!r} is invalid: use 'raise', 'exit' or 'pause:<seconds>'"
            )

    def arm(self) -> KillAt:
        return KillAt(self.point, self.checkpoint_id, mode=self.mode)


class KillAt:
    """Kill once at ``point`` (for checkpoint ``checkpoint_id`` if given); then disarm."""

    def __init__(self, point: str, checkpoint_id: int | None = None, *, mode: str = "raise") -> None:
        self.spec = KillSpec(point, checkpoint_id, mode)
        self.point = point
        self.checkpoint_id = checkpoint_id
        self.mode = mode
        self.fired = False

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None:
        if self.fired or point != self.point:
            return
        if self.checkpoint_id is not None and checkpoint_id != self.checkpoint_id:
            return
        self.fired = True
        if self.mode == "exit":
            os._exit(137)
        if self.mode.startswith("pause:"):
            time.sleep(_seconds(self.mode.removeprefix("pause:")) or 0.0)
            return
        raise SimulatedCrash(point, checkpoint_id)


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value <= 3600 else None


def parse_fault(spec: str) -> tuple[str, int | None]:
    point, _, checkpoint = spec.partition("@")
    if checkpoint and not checkpoint.isdigit():
        raise InvalidFaultSpec(f"EPOCHAL_FAULT={spec!r} is invalid: use <kill_point>[@<checkpoint_id>]")
    return point, int(checkpoint) if checkpoint else None


def kill_spec_from_env(environ: Mapping[str, str]) -> KillSpec | None:
    """The fault ``EPOCHAL_FAULT``/``EPOCHAL_FAULT_MODE`` in ``environ`` ask for, or ``None``."""
    spec = environ.get("EPOCHAL_FAULT", "").strip()
    if not spec:
        return None
    point, checkpoint_id = parse_fault(spec)
    return KillSpec(point, checkpoint_id, environ.get("EPOCHAL_FAULT_MODE", "raise"))


def kill_switch_from_env(environ: Mapping[str, str]) -> KillSwitch:
    """The kill switch ``environ`` asks for, or the no-op switch. Entry points only: they pass
    the process environment; nothing below them reads it."""
    spec = kill_spec_from_env(environ)
    return NO_KILL if spec is None else spec.arm()


def task_kill_spec(kill: KillSwitch) -> KillSpec | None:
    """The spec a driver-side switch passes on to its Spark tasks (``None`` for the no-op switch)."""
    spec = getattr(kill, "spec", None)
    return spec if isinstance(spec, KillSpec) else None


def arm(spec: KillSpec | None) -> KillSwitch:
    """A fresh switch for one task (each task fires once, as each process would)."""
    return NO_KILL if spec is None else spec.arm()
