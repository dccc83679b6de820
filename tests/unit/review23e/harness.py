"""Shared pieces for the review of commits 1fbcc1d and 0815557 (spill runs in blocks with an index,
streaming merges of bounded fan-in): keys of every type a store accepts, a dict model of a store,
a directory standing in for the checkpoint store, and a spy on what one merge reads at once."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.spill import RunFile, SpillSnapshot, SpillStore
from state_store.spill import store as store_module
from state_store.spill.store import MIN_BUDGET

MAX_P = 8
FULL = KeyGroupRange(0, MAX_P - 1)
BUDGET = MIN_BUDGET

KEY_TYPES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int8": (pa.int8(), [-128, 127, 0, -1, 1, 5, -5, 64, -64, 100]),
    "int16": (pa.int16(), [-(2**15), 2**15 - 1, 0, -1, 300, -300, 7, 1000]),
    "int32": (pa.int32(), [-(2**31), 2**31 - 1, 0, -1, 65_536, -65_536, 9, 123_456]),
    "int64": (pa.int64(), [-(2**63), 2**63 - 1, 0, -1, 2**62, -(2**62), 2**31, 11, -11, 7_919_003]),
    "uint8": (pa.uint8(), [0, 255, 1, 128, 127, 7, 200]),
    "uint16": (pa.uint16(), [0, 2**16 - 1, 1, 2**15, 2**15 - 1, 9]),
    "uint32": (pa.uint32(), [0, 2**32 - 1, 1, 2**31, 2**31 - 1, 77]),
    "uint64": (pa.uint64(), [0, 2**64 - 1, 1, 2**63, 2**63 - 1, 2**63 + 1, 5]),
    "string": (
        pa.string(), ["", "é", "e", "f", "日本語", "日本", "a\x00b", "a", "a\x00", "🙂", "Z", "ab", "\x7f"]
    ),
    "large_string": (pa.large_string(), ["", "é", "日本語", "日", "🙂", "\U0010ffff", "z", "zz"]),
    "binary": (
        pa.binary(),
        [b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\xff", b"\xff\x00", b"a", b"ab", b"abc", b"\x80"],
    ),
    "large_binary": (pa.large_binary(), [b"", b"\x00", b"\xff\xff", b"\xfe", b"k", b"k\x00", b"kk"]),
}  # fmt: skip


def key_of(key_type: str, i: int) -> Any:
    """The i-th key of a type: the listed extremes first, then distinct spread-out ones."""
    t, listed = KEY_TYPES[key_type]
    if i < len(listed):
        return listed[i]
    j = i - len(listed)
    if pa.types.is_integer(t):
        lo, hi = (0, 2 ** (t.bit_width) - 1) if pa.types.is_unsigned_integer(t) else (
            -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
        )  # fmt: skip
        span = hi - lo - 2 * len(listed)
        v = lo + 1 + (j * 2_654_435_761) % max(span, 1)
        return v if v not in listed else None
    text = f"k{j:04d}" + "é" * (j % 3) + "\x00" * (j % 2)
    return text if pa.types.is_string(t) or pa.types.is_large_string(t) else text.encode()


def keys_of(key_type: str, n: int) -> list[Any]:
    """``n`` distinct keys of ``key_type`` (fewer for narrow integer types)."""
    out: list[Any] = []
    seen: set[Any] = set()
    for i in range(n * 3):
        k = key_of(key_type, i)
        if k is not None and k not in seen:
            seen.add(k)
            out.append(k)
        if len(out) == n:
            break
    return out


def kg(key: Any) -> int:
    return key_group_of(key, MAX_P)


def groups(keys: list[Any]) -> np.ndarray:
    return np.array([kg(k) for k in keys], dtype=np.int32)


class Remote:
    """A directory standing in for the checkpoint store: shipped files by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def ship(self, store: SpillStore, snap: SpillSnapshot) -> SpillSnapshot:
        for f in snap.files:
            if not (self.root / f.name).exists():
                shutil.copyfile(store.directory / f.name, self.root / f.name)
        return snap

    def fetch(self) -> Callable[[RunFile, Path], None]:
        def copy(f: RunFile, path: Path) -> None:
            shutil.copyfile(self.root / f.name, path)

        return copy


def contents(store: SpillStore) -> dict[Any, Any]:
    """Everything ``items()`` yields, checking key order and key groups on the way."""
    out: dict[Any, Any] = {}
    last: tuple[int, Any] | None = None
    for group, batch in store.items():
        for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True):
            assert kg(k) == group, (k, group)
            assert last is None or (group, _order(k)) > last, ("items out of order", last, (group, k))
            last = (group, _order(k))
            out[k] = v
    return out


def _order(key: Any) -> Any:
    return key.encode() if isinstance(key, str) else key  # Arrow orders strings by their UTF-8 bytes


def lookups(store: SpillStore, keys: list[Any], key_type: pa.DataType) -> dict[Any, Any]:
    """Every key of the store's range looked up at once (and reversed, with repeats)."""
    mine = [k for k in keys if kg(k) in store.key_group_range]
    values = store.get(groups(mine), pa.array(mine, key_type)).to_pylist()
    again = mine[::-1] * 2
    assert store.get(groups(again), pa.array(again, key_type)).to_pylist() == values[::-1] * 2
    return {k: v for k, v in zip(mine, values, strict=True) if v is not None}


@contextmanager
def merge_spy() -> Iterator[list[dict[str, int]]]:
    """Records, for every ``_merged`` call, how many files and logical runs it reads at once."""
    seen: list[dict[str, int]] = []
    original = store_module.SpillStore._merged

    def spy(self: SpillStore, key_group: int, runs: Any, drop_tombstones: bool) -> Any:
        having = [r for r, _ in runs if r.blocks(key_group)]
        seen.append({"files": len(having), "logical": len({r.run_id for r in having}), "runs": len(runs)})
        return original(self, key_group, runs, drop_tombstones)

    store_module.SpillStore._merged = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        store_module.SpillStore._merged = original  # type: ignore[method-assign]
