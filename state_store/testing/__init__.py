"""Public fault-injection kit: kill points, a faulty store, a manual clock.

A real S3 server for tests lives in ``state_store.testing.seaweedfs`` (``SeaweedFSServer``); it is
not imported here so the kit stays light.
"""

from state_store.core.stream import ScriptedChannel
from state_store.testing.clock import ManualClock
from state_store.testing.faulty_store import Fault, FaultyObjectStore
from state_store.testing.killpoints import KillAt, SimulatedCrash, kill_switch_from_env

__all__ = [
    "Fault",
    "FaultyObjectStore",
    "KillAt",
    "ManualClock",
    "ScriptedChannel",
    "SimulatedCrash",
    "kill_switch_from_env",
]
