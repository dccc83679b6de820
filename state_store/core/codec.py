"""Versioned, self-checksummed JSON documents for frozen dataclasses (stdlib only).

Every document the protocol writes has this envelope::

    {"format_version": 1, "kind": "<kind>", "body": {...}, "sha256": "<hex>"}

``sha256`` is the SHA-256 of the canonical JSON of ``body`` (sorted keys, no spaces), so a torn,
truncated or bit-flipped document is detected even when it still parses. Decoding refuses, with a
:class:`ManifestError` naming the object and the remedy: invalid JSON, a wrong kind, a checksum
mismatch, a missing or mistyped field, and a ``format_version`` newer than the kind's
(:func:`format_version`; :class:`UnsupportedFormatVersion`).

Versions are per kind: :data:`FORMAT_VERSION` (1) unless :data:`FORMAT_VERSIONS` says otherwise.
Version 2 of ``ack``, ``metadata`` and ``sink_commit`` (the documents that carry data-file handles)
spells a handle's checksum ``"checksum": "<algorithm>:<hex>"`` (BLAKE3 for new files, see
``state_store.core.checksums``) where version 1 had ``"sha256": "<hex>"``. Older documents are
still read: a dataclass registered with :func:`read_older_spelling` gets each JSON object through
that function first (``StateHandle`` turns ``sha256`` into ``checksum: "sha256:<hex>"``), and an
older Epochal refuses a version-2 document with "upgrade Epochal" instead of misreading it.

Field types understood by the reflective decoder: ``int``, ``float``, ``str``, ``bool``, enums
(by value), nested frozen dataclasses, ``tuple[X, ...]``, ``X | None``, and ``dict`` (any JSON
object, copied as is).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from state_store.core.errors import EpochalError

FORMAT_VERSION = 1
"""The envelope version of every kind not in :data:`FORMAT_VERSIONS`."""
FORMAT_VERSIONS: dict[str, int] = {"ack": 2, "metadata": 2, "sink_commit": 2}
"""Kinds whose current version is above :data:`FORMAT_VERSION` (module docstring)."""
_REMEDY = "do not edit checkpoint files by hand; restore from an earlier checkpoint or a savepoint"

T = TypeVar("T")


class ManifestError(ValueError, EpochalError):
    """A stored document that cannot be trusted (corrupt, truncated, wrong kind or checksum)."""


class UnsupportedFormatVersion(ManifestError):
    """A document written by a newer Epochal than this one."""


def format_version(kind: str) -> int:
    """The version this Epochal writes, and the newest it reads, of documents of ``kind``."""
    return FORMAT_VERSIONS.get(kind, FORMAT_VERSION)


_OLDER_SPELLINGS: dict[type, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def read_older_spelling(cls: type, convert: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Decode every JSON object of dataclass ``cls`` through ``convert`` first (how fields that an
    older format version spelled otherwise are read; ``convert`` returns the object unchanged when
    it already has the current spelling). Register before the first decode of ``cls``."""
    _OLDER_SPELLINGS[cls] = convert


def is_int(value: Any) -> bool:
    """An integer as JSON means it: ``bool`` (a Python int subclass) is not one."""
    return isinstance(value, int) and not isinstance(value, bool)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Exact types ``to_jsonable`` returns as they are without further checks (most values of a
document: the common case first; an ``enum`` subclassing ``str`` or ``int`` is not among them)."""


def to_jsonable(value: Any) -> Any:
    """Turn dataclasses, enums and tuples into plain JSON values."""
    if type(value) in _PLAIN:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in _fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def encode_document(kind: str, record: Any) -> bytes:
    """Serialize ``record`` (a dataclass) into the checksummed envelope."""
    body = canonical_json(to_jsonable(record))
    # == json.dumps(envelope, sort_keys=True, separators=(",", ":")): the body's canonical JSON is
    # encoded once (by the C encoder) and both hashed and embedded
    return b"".join(
        [
            b'{"body":',
            body,
            b',"format_version":%d,"kind":' % format_version(kind),
            canonical_json(kind),
            b',"sha256":"',
            sha256_hex(body).encode(),
            b'"}\n',
        ]
    )


def decode_document(data: bytes, kind: str, cls: type[T], *, key: str) -> T:
    """Parse and verify an envelope written by :func:`encode_document`; see module docstring."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(
            f"{kind} document {key!r} is not valid JSON (truncated or corrupt: {exc}); {_REMEDY}"
        ) from None
    if not isinstance(envelope, dict):
        raise ManifestError(f"{kind} document {key!r} is not a JSON object; {_REMEDY}")
    version = envelope.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ManifestError(f"{kind} document {key!r} has no integer format_version; {_REMEDY}")
    if version > format_version(kind):
        raise UnsupportedFormatVersion(
            f"{kind} document {key!r} has format_version {version}, newer than this Epochal supports "
            f"({format_version(kind)}): upgrade Epochal to read it"
        )
    if version < 1:
        raise ManifestError(f"{kind} document {key!r} has invalid format_version {version}; {_REMEDY}")
    if envelope.get("kind") != kind:
        raise ManifestError(
            f"document {key!r} is a {envelope.get('kind')!r} document, expected {kind!r}; {_REMEDY}"
        )
    body = envelope.get("body")
    if sha256_hex(canonical_json(body)) != envelope.get("sha256"):
        raise ManifestError(f"{kind} document {key!r} fails its checksum (torn or altered); {_REMEDY}")
    try:
        record: T = _decode(cls, body)
        return record
    except (TypeError, ValueError, KeyError) as exc:
        raise ManifestError(f"{kind} document {key!r} has an invalid body ({exc}); {_REMEDY}") from None


def from_jsonable(cls: type[T], value: Any, *, what: str) -> T:
    """Decode a plain JSON value (as :func:`to_jsonable` writes it, no envelope) into ``cls``.

    The reflective decoder of :func:`decode_document` (field types: module docstring): a missing or
    mistyped field, or a value that ``cls`` refuses (a ``ValueError`` from ``__post_init__``), raises
    a one-line :class:`ManifestError` naming ``what``.
    """
    try:
        record: T = _decode(cls, value)
        return record
    except (TypeError, ValueError, KeyError) as exc:
        raise ManifestError(f"{what} is invalid ({exc}); {_REMEDY}") from None


@functools.cache
def _fields(tp: type) -> tuple[dataclasses.Field[Any], ...]:
    """``dataclasses.fields(tp)``, cached (it rebuilds its tuple on every call: hot in decoding)."""
    return dataclasses.fields(tp)


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    """Resolved field types of a dataclass (cached: resolving string annotations compiles code)."""
    return typing.get_type_hints(tp)


def _decode(tp: Any, value: Any) -> Any:
    return _decoder(tp)(value)


@functools.cache
def _decoder(tp: Any) -> Callable[[Any], Any]:
    """The decoding function of field type ``tp`` (module docstring), built once per type: the
    typing introspection runs here, not per value. Same results and errors as decoding each
    value reflectively; a dataclass resolves its fields' decoders on first use (no recursion on
    self-referencing types)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = _decoder(args[0])
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        item = _decoder(item_tp)

        def decode_tuple(value: Any) -> Any:
            if not isinstance(value, list):
                raise TypeError(f"expected a list, got {type(value).__name__}")
            return tuple(map(item, value))

        return decode_tuple
    if origin is dict or tp is dict:

        def decode_dict(value: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"expected an object, got {type(value).__name__}")
            return dict(value)

        return decode_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if tp is float:

        def decode_float(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"expected a number, got {value!r}")
            return float(value)

        return decode_float
    if tp in (int, str, bool):

        def decode_scalar(value: Any) -> Any:
            if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
                raise TypeError(f"expected {tp.__name__}, got {value!r}")
            return value

        return decode_scalar
    if tp is Any:
        return lambda value: value
    raise TypeError(f"unsupported field type {tp!r}")


def _dataclass_decoder(tp: type) -> Callable[[Any], Any]:
    plan: list[tuple[str, bool, Callable[[Any], Any]]] | None = None

    def field_plan() -> list[tuple[str, bool, Callable[[Any], Any]]]:
        hints = _hints(tp)
        return [
            (
                f.name,
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
                _decoder(hints[f.name]),
            )
            for f in _fields(tp)
        ]

    def decode_dataclass(value: Any) -> Any:
        nonlocal plan
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        older = _OLDER_SPELLINGS.get(tp)
        if older is not None:
            value = older(value)
        if plan is None:
            plan = field_plan()  # rebinding is atomic: a racing thread builds an equal plan
        kwargs = {}
        for name, optional, decode in plan:
            if name not in value:
                if optional:
                    continue
                raise KeyError(f"missing field {name!r}")
            try:
                kwargs[name] = decode(value[name])
            except TypeError as exc:  # name the field: "field 'files': field 'size': expected int"
                raise TypeError(f"field {name!r}: {exc}") from None
        return tp(**kwargs)

    return decode_dataclass
