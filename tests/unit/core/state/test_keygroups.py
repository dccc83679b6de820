"""Key groups: the stable hash is a storage format (pinned), and ranges follow Flink's formulas."""

from __future__ import annotations

import enum
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_store.core.keygroups import (
    KeyGroupRange,
    key_bytes,
    key_group_of,
    key_group_range_for_subtask,
    stable_hash,
    subtask_for_key,
    subtask_for_key_group,
)

# key -> (key_bytes hex, stable_hash, key group at max_parallelism 128). Changing any of these
# breaks every existing checkpoint: do not "fix" this table, fix the code.
GOLDEN = [
    (None, "00", 10734006239897485896, 72),
    (0, "010000000100", 8600618344135408535, 23),
    (1, "010000000101", 6947858270934826169, 57),
    (-1, "0100000001ff", 16486051269539193117, 29),
    (2**64, "0100000009010000000000000000", 11146710588985867333, 69),
    ("user-1", "0300000006757365722d31", 14017857543198813865, 41),
    ("", "0300000000", 3583004333803709611, 43),
    ("é", "0300000002c3a9", 8403815571377601908, 116),
    (b"\x00\xff", "040000000200ff", 5986196951620558185, 105),
    (1.5, "023ff8000000000000", 7820065388236940912, 112),
    (float("inf"), "027ff0000000000000", 12196942790577498171, 59),
    ((1, "a"), "0500000002010000000101030000000161", 8526506655936361051, 91),
    (("a", (2, None)), "0500000002030000000161050000000201000000010200", 6139956091026461355, 43),
]


@pytest.mark.parametrize(("key", "encoded", "hashed", "group"), GOLDEN)
def test_golden_encoding_hash_and_key_group(key: object, encoded: str, hashed: int, group: int) -> None:
    assert key_bytes(key).hex() == encoded
    assert stable_hash(key) == hashed
    assert key_group_of(key, 128) == group


def test_numerically_equal_keys_share_a_key_group_like_python_dict_keys() -> None:
    class Color(enum.IntEnum):
        RED = 1

    assert key_bytes(True) == key_bytes(1) == key_bytes(1.0) == key_bytes(Color.RED)
    assert key_bytes(0) == key_bytes(-0.0) == key_bytes(False)
    assert key_bytes((1, 2.0)) == key_bytes((True, 2))
    assert len({key_bytes(k) for k in (1, "1", b"1", (1,), 1.5)}) == 5
    assert key_bytes(float("nan")) == key_bytes(-float("nan"))


@pytest.mark.parametrize("key", [[1], {"a": 1}, {1}, (1, [2]), bytearray(b"x"), object()])
def test_unsupported_key_types_raise_type_error_naming_the_type(key: object) -> None:
    with pytest.raises(TypeError, match=r"unsupported key type (list|dict|set|bytearray|object).*must be"):
        key_bytes(key)


def test_string_with_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError, match="not valid UTF-8"):
        key_bytes("\ud800")


MIXED_KEYS = (
    [f"user-{i}" for i in range(400)]
    + list(range(-100, 300))
    + [(i, f"k{i}") for i in range(100)]
    + [i / 7 for i in range(50)]
    + [bytes([i, 255 - i]) for i in range(49)]
    + [None]
)

CHILD = """
import json, sys
from state_store.core.keygroups import key_group_of
keys = json.loads(sys.stdin.read())
def revive(k):
    if isinstance(k, dict):
        return tuple(k["t"]) if "t" in k else bytes.fromhex(k["b"])
    return k
print(json.dumps([key_group_of(revive(k), 4096) for k in keys]))
"""


def _portable(key: object) -> object:
    if isinstance(key, tuple):
        return {"t": list(key)}
    if isinstance(key, bytes):
        return {"b": key.hex()}
    return key


def test_key_groups_are_identical_in_processes_with_different_hash_seeds() -> None:
    assert len(MIXED_KEYS) == 1000
    expected = [key_group_of(k, 4096) for k in MIXED_KEYS]
    payload = json.dumps([_portable(k) for k in MIXED_KEYS])
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", CHILD], input=payload, capture_output=True, text=True, env=env, check=True
        )
        assert json.loads(out.stdout) == expected, f"PYTHONHASHSEED={seed}"
    assert len(set(expected)) > 700  # and the keys actually spread over the key groups


@pytest.mark.parametrize(
    ("max_p", "p", "expected"),
    [
        (128, 3, [(0, 42), (43, 85), (86, 127)]),
        (10, 4, [(0, 2), (3, 4), (5, 7), (8, 9)]),
        (7, 7, [(i, i) for i in range(7)]),
        (1, 1, [(0, 0)]),
        (32768, 1, [(0, 32767)]),
    ],
)
def test_ranges_equal_flinks_compute_key_group_range_for_operator_index(
    max_p: int, p: int, expected: list[tuple[int, int]]
) -> None:
    ranges = [key_group_range_for_subtask(max_p, p, i) for i in range(p)]
    assert [(r.first, r.last) for r in ranges] == expected


@given(st.integers(1, 32768).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, min(m, 600)))))
def test_every_key_group_belongs_to_exactly_one_subtask_and_ranges_tile(pair: tuple[int, int]) -> None:
    max_p, p = pair
    ranges = [key_group_range_for_subtask(max_p, p, i) for i in range(p)]
    assert ranges[0].first == 0 and ranges[-1].last == max_p - 1
    for before, after in itertools.pairwise(ranges):
        assert after.first == before.last + 1  # contiguous, disjoint, no gaps
    assert all(len(r) >= 1 for r in ranges)
    for i, rng in enumerate(ranges):
        for kg in (rng.first, rng.last, (rng.first + rng.last) // 2):
            assert subtask_for_key_group(max_p, p, kg) == i


def test_subtask_for_key_routes_to_the_subtask_owning_its_key_group() -> None:
    for key in MIXED_KEYS[:200]:
        subtask = subtask_for_key(key, 128, 5)
        assert key_group_of(key, 128) in key_group_range_for_subtask(128, 5, subtask)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: key_group_range_for_subtask(0, 1, 0), "max_parallelism must be an int in 1..32768, got 0"),
        (lambda: key_group_range_for_subtask(32769, 1, 0), "max_parallelism must be an int in 1..32768"),
        (lambda: key_group_range_for_subtask(8, 9, 0), "parallelism 9 exceeds max_parallelism 8"),
        (lambda: key_group_range_for_subtask(8, 0, 0), "parallelism must be a positive int, got 0"),
        (lambda: key_group_range_for_subtask(8, 2, 2), r"subtask must be an int in 0\.\.1, got 2"),
        (lambda: subtask_for_key_group(8, 2, 8), r"key_group must be an int in 0\.\.7, got 8"),
        (lambda: key_group_of("k", 0), "max_parallelism must be an int"),
    ],
)
def test_invalid_arguments_give_one_line_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call()  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_key_group_range_is_inclusive_and_intersects() -> None:
    rng = KeyGroupRange(3, 5)
    assert list(rng) == [3, 4, 5] and len(rng) == 3
    assert 3 in rng and 5 in rng and 6 not in rng and 2 not in rng
    assert rng.intersect(KeyGroupRange(5, 9)) == KeyGroupRange(5, 5)
    assert rng.intersect(KeyGroupRange(6, 9)) == KeyGroupRange.EMPTY
    assert len(KeyGroupRange.EMPTY) == 0 and list(KeyGroupRange.EMPTY) == [] and 0 not in KeyGroupRange.EMPTY
    assert KeyGroupRange.of([7, 4, 5]) == KeyGroupRange(4, 7)
    with pytest.raises(ValueError, match=r"invalid key group range 5\.\.3"):
        KeyGroupRange(5, 3)
    with pytest.raises(ValueError):
        KeyGroupRange(-1, 2)
