"""Public fault-injection kit for tests, benchmarks and the chaos harness: a faulty store,
scripted channels, and (re-exported from the production modules ``state_store.faults`` and
``state_store.clocks``) kill switches and the manual clock.

Only ``tests/``, ``bench/`` and ``spark_jobs/chaos`` import this package (an import-linter contract).
A real S3 server for tests lives in ``state_store.testing.seaweedfs`` (``SeaweedFSServer``), a real
PostgreSQL server in ``state_store.testing.postgres`` (``PostgresServer``); they are not imported
here so the kit stays light.
"""

from state_store.clocks import ManualClock
from state_store.core.stream import ScriptedChannel
from state_store.faults import KillAt, KillSpec, SimulatedCrash
from state_store.testing.faulty_store import Fault, FaultyObjectStore

__all__ = [
    "Fault",
    "FaultyObjectStore",
    "KillAt",
    "KillSpec",
    "ManualClock",
    "ScriptedChannel",
    "SimulatedCrash",
]
