"""Kill switches for the protocol's named kill points (``state_store.core.killpoints``).

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

from state_store.core import killpoints
from state_store.core.ports import NO_KILL, KillSwitch


class SimulatedCrash(BaseException):
    """Raised at a kill point: the process 'died' there."""

    def __init__(self, point: str, checkpoint_id: int | None) -> None:
        super().__init__(f"simulated crash at kill point {point!r} (checkpoint {checkpoint_id})")
        self.point = point
        self.checkpoint_id = checkpoint_id


class InvalidFaultSpec(ValueError):
    """An EPOCHAL_FAULT value that names no kill point."""


class KillAt:
    """Kill once at ``point`` (for checkpoint ``checkpoint_id`` if given); then disarm."""

    def __init__(self, point: str, checkpoint_id: int | None = None, *, mode: str = "raise") -> None:
        if point not in killpoints.ALL:
            raise InvalidFaultSpec(
                f"kill point {point!r} does not exist: use one of {', '.join(killpoints.ALL)}"
            )
        pause = mode.removeprefix("pause:")
        if mode not in ("raise", "exit") and not (mode.startswith("pause:") and _seconds(pause) is not None):
            raise InvalidFaultSpec(
                f"EPOCHAL_FAULT_MODE={mode!r} is invalid: use 'raise', 'exit' or 'pause:<seconds>'"
            )
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


def kill_switch_from_env(environ: Mapping[str, str] | None = None) -> KillSwitch:
    """The kill switch ``EPOCHAL_FAULT`` asks for, or the no-op switch when it is unset."""
    env = os.environ if environ is None else environ
    spec = env.get("EPOCHAL_FAULT", "").strip()
    if not spec:
        return NO_KILL
    point, checkpoint_id = parse_fault(spec)
    return KillAt(point, checkpoint_id, mode=env.get("EPOCHAL_FAULT_MODE", "raise"))
