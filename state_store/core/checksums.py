"""Checksums of data files (state, channel-state and sink files): the algorithm travels with the digest.

A data file's checksum is the text ``"<algorithm>:<lowercase hex digest>"``:

* ``blake3:<64 hex>`` (:data:`STATE_FILE_ALGORITHM`) -- every data file written since handle format 2
  (the ``ack``, ``metadata`` and ``sink_commit`` documents of ``format_version`` 2, see ``codec``).
  BLAKE3 runs at several GB/s per core and releases the GIL (a restore hashes on every core), and
  it is collision-resistant, which the content-addressed ``shared/<uid>/<digest>.arrow`` keys need.
* ``sha256:<64 hex>`` -- files written before: a format-1 handle ``{"key", "size", "sha256": "<hex>"}``
  is read as ``sha256:<hex>`` and still verified with SHA-256.

The protocol documents themselves keep SHA-256 (``codec``: small, and the checksum rule is part of
their envelope); savepoint manifests keep it too (a portable format, checkable with ``sha256sum``).

Who checks what (DESIGN.md section 10): the writer computes a file's checksum while writing it
(:func:`checksum_of`) and the store verifies the bytes against it on upload where it can
(:func:`put_checked`, the optional ``put_verified`` of a store); completion checks presence and size
from the listing and takes the writer's checksum from the ack; restores and the audit
(``epochal validate --deep``) read every byte and check it (:func:`mismatch`).

This module is pure (standard library only): it computes SHA-256 with ``hashlib`` and keeps a
registry of the other algorithms, which ``state_store.hashing`` fills (imported by the ``state_store``
package itself, so it is present wherever the library is).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Protocol

from state_store.core.errors import EpochalError
from state_store.core.ports import ObjectStore

SHA256 = "sha256"
BLAKE3 = "blake3"
STATE_FILE_ALGORITHM = BLAKE3
"""The algorithm of every data file written by this version."""

DIGEST_LENGTHS = {SHA256: 64, BLAKE3: 64}
"""Hex digits of each known algorithm's digest."""

_FORM = re.compile(r"^([a-z0-9_]{1,32}):([0-9a-f]{16,128})$")


class HashObject(Protocol):
    """What ``hashlib`` (and ``blake3``) objects offer: incremental hashing."""

    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


Hasher = Callable[[], HashObject]
"""A factory of fresh hash objects of one algorithm."""
OneShot = Callable[[bytes | bytearray | memoryview], str]
"""Hex digest of a whole buffer (may use several cores for a large one)."""

_HASHERS: dict[str, tuple[Hasher, OneShot]] = {
    SHA256: (hashlib.sha256, lambda data: hashlib.sha256(data).hexdigest()),
}
_MISSING: dict[str, str] = {}


class ChecksumError(ValueError, EpochalError):
    """A checksum text that is not ``<algorithm>:<hex>`` of a known algorithm's length."""


class ChecksumUnavailableError(EpochalError):
    """A checksum algorithm this process cannot compute (its package is not installed)."""


def register(algorithm: str, new: Hasher, one_shot: OneShot | None = None) -> None:
    """Make ``algorithm`` computable: ``new()`` returns a fresh hash object; ``one_shot(data)``
    (default: through ``new``) hashes a whole buffer."""

    def through_new(data: bytes | bytearray | memoryview) -> str:
        h = new()
        h.update(data)
        return h.hexdigest()

    _HASHERS[algorithm] = (new, one_shot or through_new)
    _MISSING.pop(algorithm, None)


def unavailable(algorithm: str, remedy: str) -> None:
    """Record why ``algorithm`` cannot be computed here (said by :class:`ChecksumUnavailableError`)."""
    if algorithm not in _HASHERS:
        _MISSING[algorithm] = remedy


def parse(checksum: str) -> tuple[str, str]:
    """``(algorithm, hex digest)`` of a checksum text; :class:`ChecksumError` naming the text if it is
    not ``<algorithm>:<lowercase hex>`` or has the wrong length for a known algorithm."""
    match = _FORM.match(checksum) if isinstance(checksum, str) else None
    if match is None:
        raise ChecksumError(
            f"checksum {checksum!r} is invalid: expected '<algorithm>:<lowercase hex digest>', "
            f"e.g. '{STATE_FILE_ALGORITHM}:' followed by 64 hex digits"
        )
    algorithm, digest = match.group(1), match.group(2)
    expected = DIGEST_LENGTHS.get(algorithm)
    if expected is not None and len(digest) != expected:
        raise ChecksumError(
            f"checksum {checksum!r} is invalid: a {algorithm} digest has {expected} hex digits, "
            f"not {len(digest)}"
        )
    return algorithm, digest


def new_hash(algorithm: str) -> HashObject:
    """A fresh hash object of ``algorithm``; :class:`ChecksumUnavailableError` with the remedy."""
    return _entry(algorithm)[0]()


def hex_of(data: bytes | bytearray | memoryview, algorithm: str = STATE_FILE_ALGORITHM) -> str:
    """The hex digest of ``data`` (no algorithm prefix): the content address of a shared file."""
    return _entry(algorithm)[1](data)


def checksum_of(data: bytes | bytearray | memoryview, algorithm: str = STATE_FILE_ALGORITHM) -> str:
    """``"<algorithm>:<hex>"`` of ``data``: what a writer records in the file's handle."""
    return f"{algorithm}:{hex_of(data, algorithm)}"


def mismatch(checksum: str, data: bytes | bytearray | memoryview) -> str | None:
    """None if ``data`` has ``checksum`` (computed with the algorithm it names), else the checksum
    ``data`` actually has (same algorithm), for the error message."""
    algorithm, digest = parse(checksum)
    actual = hex_of(data, algorithm)
    return None if actual == digest else f"{algorithm}:{actual}"


def _entry(algorithm: str) -> tuple[Hasher, OneShot]:
    try:
        return _HASHERS[algorithm]
    except KeyError:
        pass
    if algorithm in _MISSING:
        raise ChecksumUnavailableError(
            f"checksum algorithm {algorithm} is not available in this process: {_MISSING[algorithm]}"
        )
    raise ChecksumUnavailableError(
        f"checksum algorithm {algorithm!r} is unknown to this Epochal (it knows "
        f"{', '.join(sorted(_HASHERS))}): the file was written by a newer Epochal; upgrade Epochal to read it"
    )


def put_checked(
    store: ObjectStore, key: str, data: bytes, checksum: str, *, create_only: bool = False
) -> str:
    """Write a data file whose writer computed ``checksum``: ``put`` (``create_only``:
    ``put_if_absent``), verified by the store on upload when it offers ``put_verified`` (local
    directory: the staged file is checksummed before its create-only link; S3: an additional
    checksum the server checks, and the bytes against ``checksum`` before sending); on a mismatch
    the store raises ``ChecksumMismatchError`` and writes nothing. Other stores just write."""
    verified = getattr(store, "put_verified", None)
    if callable(verified):
        version: str = verified(key, data, checksum, create_only=create_only)
        return version
    return store.put_if_absent(key, data) if create_only else store.put(key, data)
