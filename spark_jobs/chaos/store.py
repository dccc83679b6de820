"""The chaos store: a process-wide ``memory://`` store whose every operation passes through a
:class:`~state_store.testing.FaultyObjectStore` plus two faults the kit has no kind for:

* connection resets (``TransientStoreError`` "connection reset by peer" before the operation);
* a crash while reading state during restore (:class:`RestoreCrash`, a ``SimulatedCrash``: the
  process dies mid-restore, no cleanup runs).

Invariants: ``inner`` is the fault-free view of the same objects (checkers read through it, never
through the faults); modification times come from the run's clock (so grace periods are exact);
the store is registered under its ``memory://`` name for the run only (:meth:`close`).
"""

from __future__ import annotations

import fnmatch
import threading
import uuid
from collections.abc import Iterator
from typing import Any, cast

from state_store.clocks import ManualClock
from state_store.core.ports import ObjectData, ObjectInfo, ObjectStore, TransientStoreError
from state_store.storage.memory import MemoryObjectStore
from state_store.testing import Fault, FaultyObjectStore, SimulatedCrash


class RestoreCrash(SimulatedCrash):
    """The process died while reading a state file of its restore base."""

    def __init__(self, key: str) -> None:
        BaseException.__init__(self, f"simulated crash while restoring from {key!r}")
        self.point = "restore"
        self.checkpoint_id = None


class ChaosStore:
    """ObjectStore port over a registered in-memory store, with injectable faults."""

    def __init__(self, clock: ManualClock, *, seed: int = 0, inner: ObjectStore | None = None) -> None:
        self.name = f"chaos-{uuid.uuid4().hex[:12]}"
        self.inner: ObjectStore = inner or MemoryObjectStore(self.name, now_ms=clock.now_ms)
        self.faulty = FaultyObjectStore(self.inner, seed=seed, sleep=lambda s: None)
        self._lock = threading.Lock()
        self._resets: list[list[Any]] = []  # [glob, times]
        self._restore_crashes: list[list[Any]] = []  # [glob, times]
        self.fired: list[tuple[str, str, str]] = []  # (op, key, kind) of this store's own faults
        MemoryObjectStore.register(self.name, cast(MemoryObjectStore, self))

    @property
    def uri(self) -> str:
        return f"memory://{self.name}"

    def close(self) -> None:
        MemoryObjectStore.forget(self.name)

    # -- arming -----------------------------------------------------------------------------
    def arm(self, fault: Fault) -> None:
        self.faulty.arm(fault)

    def arm_reset(self, glob: str, times: int) -> None:
        with self._lock:
            self._resets.append([glob, times])

    def arm_restore_crash(self, glob: str, times: int, label: str = "restore_crash") -> None:
        with self._lock:
            self._restore_crashes.append([glob, times, label])

    def disarm(self) -> None:
        self.faulty.disarm()
        with self._lock:
            self._resets.clear()
            self._restore_crashes.clear()

    def drain_fired(self) -> list[tuple[str, str, str]]:
        """(op, key, kind) of every fault fired since the last call."""
        with self._lock:
            fired = list(self.faulty.injected) + self.fired
            self.faulty.injected.clear()
            self.fired = []
        return fired

    def _take(self, rules: list[list[Any]], key: str) -> list[Any] | None:
        with self._lock:
            for rule in rules:
                if rule[1] != 0 and fnmatch.fnmatchcase(key, rule[0]):
                    rule[1] -= 1
                    return rule
        return None

    def _before(self, op: str, key: str) -> None:
        if self._take(self._resets, key):
            with self._lock:
                self.fired.append((op, key, "connection_reset"))
            raise TransientStoreError(f"injected connection reset by peer on {op} {key!r} on {self.uri}")

    # -- the port ---------------------------------------------------------------------------
    def get(self, key: str) -> ObjectData:
        self._before("get", key)
        rule = self._take(self._restore_crashes, key)
        if rule is not None:
            with self._lock:
                self.fired.append(("get", key, rule[2]))
            raise RestoreCrash(key)
        return self.faulty.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self._before("head", key)
        return self.faulty.head(key)

    def put(self, key: str, data: bytes) -> str:
        self._before("put", key)
        return self.faulty.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._before("put_if_absent", key)
        return self.faulty.put_if_absent(key, data)

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        self._before("put_if_absent" if create_only else "put", key)
        return self.faulty.put_verified(key, data, checksum, create_only=create_only)

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        self._before("put_if_match", key)
        return self.faulty.put_if_match(key, data, expected_version)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._before("list", prefix)
        return self.faulty.list(prefix)

    def delete(self, key: str) -> None:
        self._before("delete", key)
        self.faulty.delete(key)
