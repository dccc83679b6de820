"""FaultyObjectStore: wraps any ObjectStore and injects faults a real server cannot produce on
demand. With no faults armed it is a transparent pass-through (it runs the contract suite).

Fault kinds (each a :class:`Fault` rule, matched by operation and key glob, seeded):

* ``error`` -- TransientStoreError (a 500) before the operation; nothing is written.
* ``throttle`` -- TransientStoreError (503 SlowDown) before the operation.
* ``timeout`` -- TransientStoreError (read timeout) before the operation.
* ``latency`` -- sleeps ``latency_s`` then performs the operation.
* ``lost_response`` -- performs the operation, then raises TransientStoreError: the write
  happened but the caller cannot know.
* ``torn`` -- writes only the first half of the bytes (bypassing the write's condition) and raises:
  a store that broke atomic visibility.
* ``bitflip`` -- writes the bytes with one bit flipped and reports success: silent corruption.
* ``disk_full`` -- StorageFullError before the operation; nothing is written.

Verified uploads (``put_verified``, the optional port method data-file writers use) meet the faults
of ``put`` (``create_only``: ``put_if_absent``) and pass on to the inner store's own verification
(``state_store.core.checksums.put_checked``): a ``bitflip`` is then refused by an inner store that
verifies uploads (memory, local, S3: ChecksumMismatchError, nothing written), as a real store refuses
bytes changed on the way; on an inner store without verification it stays silent.
"""

from __future__ import annotations

import fnmatch
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from state_store.core.checksums import put_checked
from state_store.core.ports import (
    ObjectData,
    ObjectInfo,
    ObjectStore,
    StorageFullError,
    TransientStoreError,
)

WRITES = frozenset({"put", "put_if_absent", "put_if_match"})
ALL_OPS = WRITES | {"get", "head", "list", "delete"}
KINDS = ("error", "throttle", "timeout", "latency", "lost_response", "torn", "bitflip", "disk_full")


@dataclass
class Fault:
    """Inject ``kind`` on operations ``ops`` whose key matches ``key_glob``, ``times`` times
    (-1: forever), each with ``probability``."""

    kind: str
    ops: frozenset[str] = ALL_OPS
    key_glob: str = "*"
    times: int = 1
    probability: float = 1.0
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is unknown: use one of {', '.join(KINDS)}")
        unknown = set(self.ops) - ALL_OPS
        if unknown:
            raise ValueError(f"fault ops {sorted(unknown)} are unknown: use {sorted(ALL_OPS)}")
        if self.kind in ("lost_response", "torn", "bitflip") and not set(self.ops) <= WRITES:
            self.ops = frozenset(set(self.ops) & WRITES)


class FaultyObjectStore:
    """An ObjectStore that injects the armed faults into ``inner`` (see module docstring)."""

    def __init__(
        self,
        inner: ObjectStore,
        faults: tuple[Fault, ...] | list[Fault] = (),
        *,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.faults: list[Fault] = list(faults)
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._lock = threading.Lock()
        self.injected: list[tuple[str, str, str]] = []

    @property
    def uri(self) -> str:
        return self.inner.uri

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def disarm(self) -> None:
        with self._lock:
            self.faults.clear()

    def _pick(self, op: str, key: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if op in fault.ops and fnmatch.fnmatchcase(key, fault.key_glob) and fault.times != 0:
                    if self._rng.random() >= fault.probability:
                        continue
                    if fault.times > 0:
                        fault.times -= 1
                    self.injected.append((op, key, fault.kind))
                    return fault
        return None

    def _before(self, op: str, key: str) -> Fault | None:
        fault = self._pick(op, key)
        if fault is None:
            return None
        where = f"{op} {key!r} on {self.inner.uri}"
        if fault.kind == "error":
            raise TransientStoreError(f"injected 500 InternalError on {where}")
        if fault.kind == "throttle":
            raise TransientStoreError(f"injected 503 SlowDown on {where}")
        if fault.kind == "timeout":
            raise TransientStoreError(f"injected read timeout on {where}")
        if fault.kind == "disk_full":
            raise StorageFullError(f"injected ENOSPC on {where}: free disk space and retry")
        if fault.kind == "latency":
            self._sleep(fault.latency_s)
            return None
        return fault

    def _write(self, op: str, key: str, data: bytes, do: Callable[[bytes], str]) -> str:
        fault = self._before(op, key)
        if fault is None:
            return do(data)
        if fault.kind == "torn":
            self.inner.put(key, data[: len(data) // 2])
            raise TransientStoreError(f"injected torn write of {key!r} on {self.inner.uri}")
        if fault.kind == "bitflip":
            flipped = bytearray(data)
            if flipped:
                pos = self._rng.randrange(len(flipped))
                flipped[pos] ^= 1 << self._rng.randrange(8)
            return do(bytes(flipped))
        version = do(data)  # lost_response
        raise TransientStoreError(f"injected lost response after writing {key!r} (version {version})")

    def get(self, key: str) -> ObjectData:
        self._before("get", key)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self._before("head", key)
        return self.inner.head(key)

    def put(self, key: str, data: bytes) -> str:
        return self._write("put", key, data, lambda d: self.inner.put(key, d))

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._write("put_if_absent", key, data, lambda d: self.inner.put_if_absent(key, d))

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        op = "put_if_absent" if create_only else "put"
        return self._write(
            op, key, data, lambda d: put_checked(self.inner, key, d, checksum, create_only=create_only)
        )

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        return self._write(
            "put_if_match", key, data, lambda d: self.inner.put_if_match(key, d, expected_version)
        )

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._before("list", prefix)
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._before("delete", key)
        self.inner.delete(key)
