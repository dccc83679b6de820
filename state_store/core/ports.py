"""Ports: the only ways the pure core touches the outside world.

The core never opens a file, a socket or reads the clock. Everything it needs from outside comes
through the three protocols below, injected by the caller:

* :class:`ObjectStore` -- a flat key/value object store (S3, a local directory, memory).
* :class:`Clock` -- milliseconds since the epoch, injectable so tests run on a manual clock.
* :class:`KillSwitch` -- called at every named protocol step; fault-injection kits make it crash.

ObjectStore guarantees (every adapter must pass ``tests/unit/storage/contract.py``)
-----------------------------------------------------------------------------------
1. **Atomic visibility.** A reader sees either the whole previous content of a key or the whole new
   one, never a prefix. A failed or interrupted write leaves the previous content (or no key).
2. **Create-only** (:meth:`ObjectStore.put_if_absent`) is a mutual-exclusion primitive: of any number
   of concurrent creators of one key, exactly one succeeds; the others get
   :class:`ObjectAlreadyExists`. Retrying a create whose response was lost is safe: if the key
   already holds exactly the same bytes the call succeeds and returns that version.
3. **Compare-and-swap** (:meth:`ObjectStore.put_if_match`) replaces a key only if its current
   version equals ``expected_version``; otherwise (or if the key is missing) it raises
   :class:`VersionMismatch` and changes nothing. Same lost-response rule as 2.
4. **Read-after-write.** Once a put returns, get/head/list observe it (S3 has been strongly
   consistent since 2020; SeaweedFS and the local disk are too).
5. **Versions are opaque** strings that change whenever the content changes.
6. **Listing** returns every key that starts with the prefix (plain string prefix, not a folder),
   in ascending key order.
7. **Delete is idempotent**: deleting a missing key is not an error.

Optional: verified uploads. A store may offer
``put_verified(key, data, checksum, *, create_only) -> version``: a ``put`` (``create_only``: a
``put_if_absent``, same rules) that makes ``data`` visible only if the bytes it is about to install
have ``checksum`` (``"<algorithm>:<hex>"``, see ``state_store.core.checksums``), else raises
:class:`ChecksumMismatchError` and changes nothing. Writers of data files call it through
``checksums.put_checked`` (which falls back to a plain put on stores without it).

Keys are relative, '/'-separated, without empty, '.' or '..' segments (see ``validate_key``).
Transient failures (throttling, 5xx, timeouts, resets) that an adapter could not absorb with its own
bounded retries surface as :class:`TransientStoreError`; the caller's step then fails and is retried
as a whole, which every protocol step allows (each is idempotent and re-runnable).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from state_store.core.errors import EpochalError


class StoreError(EpochalError):
    """Base class of every error an ObjectStore raises."""


class ObjectNotFound(StoreError):
    """The key does not exist."""


class ObjectAlreadyExists(StoreError):
    """A create-only put found the key already present (with other content)."""


class VersionMismatch(StoreError):
    """A compare-and-swap put found another version (or no object) under the key."""


class TransientStoreError(StoreError):
    """A failure that may succeed on retry: throttling, 5xx, timeout, connection reset."""


class ChecksumMismatchError(TransientStoreError):
    """A verified upload whose bytes do not match the checksum its writer computed (changed in
    memory, in transit or on the way to disk): refused, nothing was written. Retrying the step
    writes the bytes again."""


class StorageFullError(StoreError):
    """The store has no space left; the write was rolled back and nothing was changed."""


class InvalidKeyError(StoreError, ValueError):
    """A key that is not a safe relative path."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What ``head``/``list`` tell about one object."""

    key: str
    size: int
    version: str
    modified_ms: int


@dataclass(frozen=True, slots=True)
class ObjectData:
    """Content of an object together with the version it was read at (for CAS)."""

    key: str
    data: bytes
    version: str


@runtime_checkable
class ObjectStore(Protocol):
    """A flat object store with create-only and compare-and-swap writes (see module docstring)."""

    @property
    def uri(self) -> str:
        """Where this store points, safe to print (never contains credentials)."""
        ...

    def get(self, key: str) -> ObjectData:
        """Return the content and version; raise ObjectNotFound if missing."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """Return size/version/mtime of the key, or None if missing."""
        ...

    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally (atomic replace); return the new version."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create the key; raise ObjectAlreadyExists if it exists with other bytes."""
        ...

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        """Replace the key only if its version is ``expected_version``; else VersionMismatch."""
        ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Yield every object whose key starts with ``prefix``, in ascending key order."""
        ...

    def delete(self, key: str) -> None:
        """Remove the key; a missing key is not an error."""
        ...


class Clock(Protocol):
    """Wall-clock time in milliseconds since the Unix epoch."""

    def now_ms(self) -> int: ...


class KillSwitch(Protocol):
    """Called by the protocol at each named kill point (see ``state_store.core.killpoints``).

    Production wiring passes :data:`NO_KILL`; the fault kit's switch raises or exits the process.
    """

    def __call__(self, point: str, checkpoint_id: int | None = None) -> None: ...


def _no_kill(point: str, checkpoint_id: int | None = None) -> None:
    return None


NO_KILL: KillSwitch = _no_kill

_SEGMENT = re.compile(r"^[A-Za-z0-9_.=@+,-]+$")


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe relative object key, else raise InvalidKeyError.

    Refused: empty keys, a leading or trailing '/', empty segments, '.' or '..' segments,
    backslashes, control characters and anything outside ``[A-Za-z0-9_.=@+,-/]``.
    """
    if not key or key.startswith("/") or key.endswith("/"):
        raise InvalidKeyError(f"object key {key!r} is invalid: use a relative path like 'job/LATEST'")
    for segment in key.split("/"):
        if segment in ("", ".", "..") or not _SEGMENT.match(segment):
            raise InvalidKeyError(
                f"object key {key!r} is invalid: segment {segment!r} is empty, '.', '..' or has "
                "characters outside [A-Za-z0-9_.=@+,-]"
            )
    return key


def validate_prefix(prefix: str) -> str:
    """Like :func:`validate_key` but allows '' and a trailing '/' (a listing prefix)."""
    if prefix == "":
        return prefix
    validate_key(prefix.rstrip("/") or "x")
    if prefix.startswith("/"):
        raise InvalidKeyError(f"listing prefix {prefix!r} is invalid: it must be relative")
    return prefix
