"""Read and write protocol documents through the ObjectStore port (encode/verify + key checks)."""

from __future__ import annotations

from typing import Any, TypeVar

from state_store.core.codec import decode_document, encode_document
from state_store.core.manifests import KINDS
from state_store.core.ports import ObjectData, ObjectNotFound, ObjectStore

T = TypeVar("T")


def encode(record: Any) -> bytes:
    return encode_document(KINDS[type(record)], record)


def decode(data: bytes, cls: type[T], *, key: str) -> T:
    return decode_document(data, KINDS[cls], cls, key=key)


def read(store: ObjectStore, key: str, cls: type[T]) -> T:
    """Read and verify one document; ObjectNotFound or ManifestError propagate."""
    return decode(store.get(key).data, cls, key=key)


def read_versioned(store: ObjectStore, key: str, cls: type[T]) -> tuple[T, ObjectData]:
    raw = store.get(key)
    return decode(raw.data, cls, key=key), raw


def read_optional(store: ObjectStore, key: str, cls: type[T]) -> T | None:
    try:
        return read(store, key, cls)
    except ObjectNotFound:
        return None


def create(store: ObjectStore, key: str, record: Any) -> str:
    """Create-only write of a document; ObjectAlreadyExists if another one is there."""
    return store.put_if_absent(key, encode(record))
