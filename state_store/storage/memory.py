"""In-memory ObjectStore: a real implementation of the port (not a mock), for tests and demos.

Thread-safe; every operation is atomic under one lock. Versions are a per-store counter, so they
change on every write (even of identical bytes), which is stricter than the port requires.
Stores registered under a name (``memory://name``) are shared by every opener in the process.
``put_verified`` checksums the bytes it is about to keep against the writer's checksum (so the
fault kit's bit flips on the way in are refused, as the local and S3 stores refuse them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from state_store.core import checksums
from state_store.core.ports import (
    ChecksumMismatchError,
    ObjectAlreadyExists,
    ObjectData,
    ObjectInfo,
    ObjectNotFound,
    VersionMismatch,
    validate_key,
    validate_prefix,
)


class MemoryObjectStore:
    """Objects in a dict; ``modified_ms`` comes from an injectable ``now_ms`` function."""

    #: Reads may run concurrently (every operation holds the lock); see ``state_store.core.parallel``.
    max_concurrent_reads = 16
    #: Writes may run concurrently too (every operation holds the lock).
    max_concurrent_writes = 4

    _named: dict[str, MemoryObjectStore] = {}
    _named_lock = threading.Lock()

    def __init__(self, name: str = "", now_ms: Callable[[], int] | None = None) -> None:
        self._name = name
        self._objects: dict[str, tuple[bytes, str, int]] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self._now_ms: Callable[[], int] = now_ms if now_ms is not None else (lambda: 0)

    @classmethod
    def named(cls, name: str) -> MemoryObjectStore:
        """Return the process-wide store registered under ``name`` (created on first use)."""
        with cls._named_lock:
            if name not in cls._named:
                cls._named[name] = cls(name)
            return cls._named[name]

    @classmethod
    def register(cls, name: str, store: MemoryObjectStore) -> None:
        """Make ``memory://name`` open ``store`` (a wrapper such as a fault-injecting store)."""
        with cls._named_lock:
            cls._named[name] = store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop the named store ``memory://name`` (its objects go with it)."""
        with cls._named_lock:
            cls._named.pop(name, None)

    @property
    def uri(self) -> str:
        return f"memory://{self._name}"

    def _write(self, key: str, data: bytes) -> str:
        self._counter += 1
        version = f"v{self._counter}"
        self._objects[key] = (bytes(data), version, self._now_ms())
        return version

    def get(self, key: str) -> ObjectData:
        validate_key(key)
        with self._lock:
            if key not in self._objects:
                raise ObjectNotFound(f"object {key!r} not found in {self.uri}")
            data, version, _ = self._objects[key]
            return ObjectData(key, data, version)

    def head(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        with self._lock:
            if key not in self._objects:
                return None
            data, version, modified = self._objects[key]
            return ObjectInfo(key, len(data), version, modified)

    def put(self, key: str, data: bytes) -> str:
        validate_key(key)
        with self._lock:
            return self._write(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        validate_key(key)
        with self._lock:
            current = self._objects.get(key)
            if current is not None:
                if current[0] == data:
                    return current[1]
                raise ObjectAlreadyExists(f"object {key!r} already exists in {self.uri}")
            return self._write(key, data)

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        """``put`` (``create_only``: ``put_if_absent``) of bytes that must have ``checksum``;
        ChecksumMismatchError, nothing written, if they do not."""
        validate_key(key)
        actual = checksums.mismatch(checksum, data)
        if actual is not None:
            raise ChecksumMismatchError(
                f"upload of {key!r} to {self.uri} refused: its bytes have checksum {actual}, its writer "
                f"computed {checksum}; nothing was written: retry"
            )
        return self.put_if_absent(key, data) if create_only else self.put(key, data)

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        validate_key(key)
        with self._lock:
            current = self._objects.get(key)
            if current is None or current[1] != expected_version:
                if current is not None and current[0] == data:
                    return current[1]
                raise VersionMismatch(f"object {key!r} in {self.uri} is not at version {expected_version!r}")
            return self._write(key, data)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        with self._lock:
            items = sorted((k, v) for k, v in self._objects.items() if k.startswith(prefix))
        for key, (data, version, modified) in items:
            yield ObjectInfo(key, len(data), version, modified)

    def delete(self, key: str) -> None:
        validate_key(key)
        with self._lock:
            self._objects.pop(key, None)
