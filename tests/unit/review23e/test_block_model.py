"""Adversarial model test of the block format: for keys of every type the store accepts (integer
extremes of every width, empty / non-ASCII / NUL-bearing strings, binaries that are prefixes of
each other) and blocks of 1, 7 and 64 bytes (every key group is many blocks, so every read prunes
by the index and every merge streams and bounds), a store equals a dict through puts, deletes and
re-puts across many runs, partial and full compactions (max_runs 10: more logical runs than a
merge's fan-in of 6, merged in passes), restores into the same and a fresh directory, rescales
1 -> k -> 1 (the halves adopt the same files, cut inside key groups, with their own ranges) and TTL
expiry (``expires_field``/``now_ms``: a full merge and ``items`` drop what expired; ``get`` may
still see an expired entry until a full merge, never a wrong or resurrected one)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from state_store.core.keygroups import KeyGroupRange
from state_store.spill import SpillSnapshot, SpillStore, restore
from state_store.spill.runs import RunReader
from tests.unit.review23e.harness import (
    BUDGET,
    FULL,
    KEY_TYPES,
    MAX_P,
    Remote,
    contents,
    groups,
    keys_of,
    lookups,
    merge_spy,
)

VALUE = pa.struct([("v", pa.int64()), ("exp", pa.int64())])
OPS = ["put", "put", "put", "delete", "flush", "compact", "full", "restore", "rescale", "tick", "burst"]


def _store(path: Path, key_type: pa.DataType, block_bytes: int, now: int) -> SpillStore:
    store = SpillStore(
        path, FULL, memory_budget_bytes=BUDGET, key_type=key_type, value_type=VALUE,
        max_runs=10, block_bytes=block_bytes,
    )  # fmt: skip
    return _ttl(store, now)


def _ttl(store: SpillStore, now: int) -> SpillStore:
    store.expires_field, store.now_ms = "exp", now
    return store


def _check(
    store: SpillStore, keys: list[Any], key_type: pa.DataType, model: dict[Any, Any], now: int
) -> None:
    """``get`` returns the model's value for every live key and nothing for deleted ones; for an
    expired key either its latest value or nothing (it is dropped only by a full merge)."""
    got = lookups(store, keys, key_type)
    for k in keys:
        want = model.get(k)
        if want is None:
            assert k not in got, ("deleted key is back", k, got.get(k))
        elif want["exp"] is not None and want["exp"] <= now:
            assert got.get(k) in (None, want), ("expired key has a wrong value", k, got.get(k), want)
        else:
            assert got.get(k) == want, (k, got.get(k), want)


def _live(model: dict[Any, Any], now: int) -> dict[Any, Any]:
    return {k: v for k, v in model.items() if v["exp"] is None or v["exp"] > now}


def _run(tmp: Path, key_name: str, block_bytes: int, seed: int, steps: int) -> list[dict[str, int]]:
    rnd = random.Random(seed)
    key_type = KEY_TYPES[key_name][0]
    keys = keys_of(key_name, 40)
    remote = Remote(tmp / "remote")
    dirs = iter(range(10_000))
    now = 1_000
    store = _store(tmp / f"s{next(dirs)}", key_type, block_bytes, now)
    model: dict[Any, Any] = {}
    writes = 0

    def put(target: SpillStore, chosen: list[Any]) -> None:
        nonlocal writes
        values = []
        for k in chosen:
            writes += 1
            exp = rnd.choice([None, None, now + rnd.randint(-50, 400)])
            values.append({"v": writes, "exp": exp})
            model[k] = values[-1]
        target.put(groups(chosen), pa.array(chosen, key_type), pa.array(values, VALUE))

    with merge_spy() as merges:
        for _ in range(steps):
            op = rnd.choice(OPS)
            if op == "put":
                put(store, rnd.sample(keys, rnd.randint(1, 12)))
            elif op == "burst":  # runs enough to exceed the fan-in: merges in passes
                for _ in range(8):
                    put(store, rnd.sample(keys, 6))
                    store.flush()
            elif op == "delete":
                gone = rnd.sample(keys, rnd.randint(1, 6))
                store.delete(groups(gone), pa.array(gone, key_type))
                for k in gone:
                    model.pop(k, None)
            elif op == "flush":
                store.flush()
            elif op in ("compact", "full"):
                store.flush()
                store.compact(everything=op == "full")
            elif op == "tick":
                now += rnd.randint(0, 200)
                store.now_ms = now
            elif op == "restore":
                snap = remote.ship(store, store.snapshot())
                store.close()
                where = store.directory if rnd.random() < 0.5 else tmp / f"s{next(dirs)}"
                store, _ = restore(
                    where, [(snap, remote.fetch())], FULL, memory_budget_bytes=BUDGET,
                    max_runs=10, block_bytes=block_bytes,
                )  # fmt: skip
                _ttl(store, now)
            elif op == "rescale":  # 1 -> k subtasks (each changes its share) -> 1
                snap = remote.ship(store, store.snapshot())
                store.close()
                cuts = sorted(rnd.sample(range(1, MAX_P), rnd.randint(1, 4)))
                bounds = [0, *cuts, MAX_P]
                parts: list[SpillSnapshot] = []
                for lo, hi in itertools.pairwise(bounds):
                    rng = KeyGroupRange(lo, hi - 1)
                    part, _ = restore(
                        tmp / f"s{next(dirs)}", [(snap, remote.fetch())], rng, memory_budget_bytes=BUDGET,
                        max_runs=10, block_bytes=block_bytes,
                    )  # fmt: skip
                    _ttl(part, now)
                    mine = [k for k in keys if k is not None and groups([k])[0] in rng]
                    for _ in range(rnd.randint(0, 3)):
                        if mine:
                            put(part, rnd.sample(mine, min(len(mine), rnd.randint(1, 5))))
                            part.flush()
                    if mine and rnd.random() < 0.5:
                        gone = rnd.sample(mine, 1)
                        part.delete(groups(gone), pa.array(gone, key_type))
                        model.pop(gone[0], None)
                    parts.append(remote.ship(part, part.snapshot()))
                    part.close()
                store, _ = restore(
                    tmp / f"s{next(dirs)}", [(p, remote.fetch()) for p in parts], FULL,
                    memory_budget_bytes=BUDGET, max_runs=10, block_bytes=block_bytes,
                )  # fmt: skip
                _ttl(store, now)
            _check(store, keys, key_type, model, now)
        assert contents(store) == _live(model, now)
        _check(store, keys, key_type, model, now)
        store.compact(everything=True)
        got = lookups(store, keys, key_type)
        assert got == _live(model, now)  # a full merge dropped every expired entry
    for f in store.snapshot_files():  # the runs really are cut into blocks
        reader = RunReader(store.directory / f.name, 0)
        assert all(
            reader.block(b).num_rows <= max(1, block_bytes // 8)
            for bs in reader.key_groups.values()
            for b in bs
        )
        reader.close()
    store.close()
    return merges


CASES = [(name, size) for i, name in enumerate(KEY_TYPES) for size in ([1, 7, 64] * 2)[i % 3 : i % 3 + 2]]
"""Every key type with two of the block sizes (1 byte: one row a block; 7; 64: a few rows)."""


@pytest.mark.parametrize(("key_name", "block_bytes"), CASES)
def test_blocks_of_every_key_type_equal_a_dict(tmp_path: Path, key_name: str, block_bytes: int) -> None:
    merges = _run(tmp_path, key_name, block_bytes, block_bytes, 36)
    assert max(m["files"] for m in merges) > 2  # merges of several runs happened
