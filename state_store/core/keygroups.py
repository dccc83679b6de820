"""Key groups: the ONE stable key -> key group function, and Flink's key-group ranges per subtask.

Keyed state is partitioned into ``max_parallelism`` key groups. A key group is the unit of keyed
state, of rescaling (a subtask owns a contiguous :class:`KeyGroupRange`) and of incremental
snapshots (an unchanged key group reuses its previous file). The driver, every executor and every
offline tool must compute the same key group for a key, in any process, forever:

    key_group_of(key, max_parallelism) == stable_hash(key) % max_parallelism

**This is a storage format.** Changing :func:`key_bytes` or :func:`stable_hash` moves keys to other
key groups, so every existing checkpoint and savepoint would restore keys into the wrong subtask.
Python's built-in ``hash()`` is salted per process (``PYTHONHASHSEED``) and is never used.

Canonical key encoding (:func:`key_bytes`), format version 1
------------------------------------------------------------
Every encoding is self-delimiting, so a tuple is the concatenation of its elements::

    None                      0x00
    int (bool, integral float) 0x01 | u32 n | n bytes: two's complement, big-endian, minimal length
    float (non-integral, inf)  0x02 | 8 bytes: IEEE-754 binary64, big-endian (every NaN -> 7ff8000000000000)
    str                        0x03 | u32 n | n bytes: UTF-8 (strict; lone surrogates are refused)
    bytes                      0x04 | u32 n | n bytes
    tuple                      0x05 | u32 n | the n element encodings, in order

``u32`` is an unsigned 32-bit big-endian length. Subclasses (``IntEnum``, ``StrEnum``, named
tuples) encode as their base type. Anything else (list, dict, set, Decimal, datetime, ...) raises
:class:`TypeError` naming the type.

Trap -- numerically equal keys are ONE key. Python treats ``True``, ``1`` and ``1.0`` as the same
dict key (they are ``==`` with equal ``hash()``), and the state backend stores keys in dicts; so
they must also share a key group, or one key's state could be split across subtasks. Hence ``bool``
and integral floats (``-0.0``, ``2.0``, ``1e20``) encode exactly like the equal ``int``. The type tag
still separates everything Python considers different (``"1"`` vs ``1`` vs ``b"1"`` vs ``(1,)``).

    stable_hash(key) = int.from_bytes(blake2b(key_bytes(key), digest_size=8).digest(), "big")

an unsigned 64-bit integer (``hashlib.blake2b`` with no key, salt or person; digest_size 8).

Key-group ranges (Flink's ``KeyGroupRangeAssignment``, integer division rounds down)
----------------------------------------------------------------------------------
    range for subtask i = [ceil(i * maxP / p), floor(((i + 1) * maxP - 1) / p)]
    subtask for group g = floor(g * p / maxP)

Ranges are inclusive at both ends (``last`` is a member; ``len = last - first + 1``), contiguous,
disjoint, and cover ``0 .. maxP - 1``. The empty range is ``KeyGroupRange(0, -1)``.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

UPPER_BOUND_MAX_PARALLELISM = 1 << 15
"""Largest supported max_parallelism (32768), as in Flink."""

KEY_ENCODING_VERSION = 1

_NONE, _INT, _FLOAT, _STR, _BYTES, _TUPLE = 0, 1, 2, 3, 4, 5
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")
_CANONICAL_NAN = bytes.fromhex("7ff8000000000000")
_SUPPORTED = "None, bool, int, float, str, bytes or a tuple of these"


def key_bytes(key: Any) -> bytes:
    """Canonical, type-tagged bytes of ``key`` (see the module docstring for the exact format)."""
    out = bytearray()
    _encode(key, out, key)
    return bytes(out)


def _encode(value: Any, out: bytearray, root: Any) -> None:
    if value is None:
        out.append(_NONE)
    elif isinstance(value, int):  # includes bool: True == 1 must share the encoding
        _encode_int(int(value), out)
    elif isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            _encode_int(int(value), out)
        else:
            out.append(_FLOAT)
            out += _CANONICAL_NAN if math.isnan(value) else _F64.pack(value)
    elif isinstance(value, str):
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"key {root!r} contains a string that is not valid UTF-8 ({exc})") from None
        out.append(_STR)
        out += _U32.pack(len(data))
        out += data
    elif isinstance(value, bytes):
        out.append(_BYTES)
        out += _U32.pack(len(value))
        out += value
    elif isinstance(value, tuple):
        out.append(_TUPLE)
        out += _U32.pack(len(value))
        for item in value:
            _encode(item, out, root)
    else:
        where = "" if value is root else f" inside key {root!r}"
        raise TypeError(
            f"unsupported key type {type(value).__name__}{where}: keys must be {_SUPPORTED} "
            "(convert it, e.g. a list to a tuple, a datetime to an int of milliseconds)"
        )


def _encode_int(value: int, out: bytearray) -> None:
    data = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
    out.append(_INT)
    out += _U32.pack(len(data))
    out += data


def check_key_type(key: Any, what: str = "key") -> None:
    """Raise TypeError unless ``key`` is made only of supported key types (no encoding, no hashing)."""
    if key is None or isinstance(key, (int, float, str, bytes)):
        return
    if isinstance(key, tuple):
        for item in key:
            check_key_type(item, what)
        return
    raise TypeError(f"unsupported {what} type {type(key).__name__}: {what}s must be {_SUPPORTED}")


def stable_hash(key: Any) -> int:
    """Unsigned 64-bit hash of ``key``, identical in every process and on every machine.

    ``int.from_bytes(hashlib.blake2b(key_bytes(key), digest_size=8).digest(), "big")``: BLAKE2b
    without key, salt or personalisation, 8-byte digest read as a big-endian unsigned integer.
    A storage format: never change it (see module docstring).
    """
    return int.from_bytes(hashlib.blake2b(key_bytes(key), digest_size=8).digest(), "big")


def key_group_of(key: Any, max_parallelism: int) -> int:
    """The key group of ``key``: ``stable_hash(key) % max_parallelism`` (in ``0 .. maxP - 1``)."""
    check_max_parallelism(max_parallelism)
    return stable_hash(key) % max_parallelism


def key_groups_of_many(keys: Iterable[Any], max_parallelism: int) -> list[int]:
    """``[key_group_of(k, max_parallelism) for k in keys]``, faster: the check of
    ``max_parallelism`` once, and ``int``/``str`` keys (not ``bool``, not subclasses) encoded inline
    with the exact bytes of :func:`key_bytes`; every other key goes through :func:`key_bytes`.
    ``tests/unit/runtime/test_keys.py`` proves equality with the scalar function."""
    check_max_parallelism(max_parallelism)
    blake2b, u32 = hashlib.blake2b, _U32.pack
    out: list[int] = []
    append = out.append
    for key in keys:
        kind = type(key)
        if kind is int:
            data = key.to_bytes((key.bit_length() + 8) // 8, "big", signed=True)
            encoded = b"\x01" + u32(len(data)) + data
        elif kind is str:
            try:
                data = key.encode("utf-8")
            except UnicodeEncodeError:
                encoded = key_bytes(key)  # raises the one-line error naming the key
            else:
                encoded = b"\x03" + u32(len(data)) + data
        else:
            encoded = key_bytes(key)
        append(int.from_bytes(blake2b(encoded, digest_size=8).digest(), "big") % max_parallelism)
    return out


def check_max_parallelism(max_parallelism: int) -> None:
    """Raise ValueError unless ``1 <= max_parallelism <= 32768``."""
    if (
        not isinstance(max_parallelism, int)
        or isinstance(max_parallelism, bool)
        or not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM
    ):
        raise ValueError(
            f"max_parallelism must be an int in 1..{UPPER_BOUND_MAX_PARALLELISM}, got {max_parallelism!r}"
        )


def check_parallelism(max_parallelism: int, parallelism: int) -> None:
    """Raise ValueError unless max_parallelism is valid and ``1 <= parallelism <= max_parallelism``."""
    check_max_parallelism(max_parallelism)
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or not parallelism >= 1:
        raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
    if parallelism > max_parallelism:
        raise ValueError(
            f"parallelism {parallelism} exceeds max_parallelism {max_parallelism}: a subtask needs at "
            "least one key group; lower the parallelism (max_parallelism cannot change on restore)"
        )


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """Key groups ``first .. last``, both INCLUSIVE (Flink's ``KeyGroupRange``).

    ``KeyGroupRange(3, 5)`` holds 3, 4 and 5 (``len == 3``). The empty range is
    :attr:`EMPTY` ``= KeyGroupRange(0, -1)``; any other ``last < first`` is refused.
    """

    first: int
    last: int

    EMPTY: ClassVar[KeyGroupRange]

    def __post_init__(self) -> None:
        if self.first < 0 or (self.last < self.first and (self.first, self.last) != (0, -1)):
            raise ValueError(
                f"invalid key group range {self.first}..{self.last}: need 0 <= first <= last "
                "(or KeyGroupRange.EMPTY)"
            )

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.first <= key_group <= self.last

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.first, self.last + 1))

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}" if len(self) else "empty"

    def intersect(self, other: KeyGroupRange) -> KeyGroupRange:
        """The key groups in both ranges, or :attr:`EMPTY`."""
        first, last = max(self.first, other.first), min(self.last, other.last)
        return KeyGroupRange(first, last) if first <= last else KeyGroupRange.EMPTY

    @classmethod
    def of(cls, key_groups: Iterable[int]) -> KeyGroupRange:
        """The smallest range holding every given key group (EMPTY for none)."""
        groups = list(key_groups)
        return cls(min(groups), max(groups)) if groups else cls.EMPTY


KeyGroupRange.EMPTY = KeyGroupRange(0, -1)


def key_group_range_for_subtask(max_parallelism: int, parallelism: int, subtask: int) -> KeyGroupRange:
    """Flink's ``computeKeyGroupRangeForOperatorIndex``: the key groups subtask ``subtask`` owns."""
    check_parallelism(max_parallelism, parallelism)
    _check_index("subtask", subtask, parallelism)
    first = (subtask * max_parallelism + parallelism - 1) // parallelism
    last = ((subtask + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(first, last)


def subtask_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Flink's ``computeOperatorIndexForKeyGroup``: the subtask that owns ``key_group``."""
    check_parallelism(max_parallelism, parallelism)
    _check_index("key_group", key_group, max_parallelism)
    return key_group * parallelism // max_parallelism


def subtask_for_key(key: Any, max_parallelism: int, parallelism: int) -> int:
    """Where a record with ``key`` must be routed (Flink's ``assignKeyToParallelOperator``)."""
    return subtask_for_key_group(max_parallelism, parallelism, key_group_of(key, max_parallelism))


def _check_index(name: str, value: int, bound: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < bound:
        raise ValueError(f"{name} must be an int in 0..{bound - 1}, got {value!r}")
