"""The fast paths of the keyed-state file codec write the same bytes and read the same rows."""

from __future__ import annotations

import pytest

from state_store.formats import keyed
from state_store.formats.json_codec import key_to_json, value_to_json

VALUES = [0, -7, 2**70, [1, 2, 3], [], [1, "a"], [1.5, 2], {"a": [1]}, True, None, "x", [True, 1]]
KEYS = [0, -3, 2**70, "k", (1, "a"), 1.0, True, None, b"\x00"]


@pytest.mark.parametrize("value", VALUES)
def test_value_text_is_identical(value: object) -> None:
    assert keyed._value_json(value, state="s", key=1) == value_to_json(value, state="s", key=1)


@pytest.mark.parametrize("key", KEYS)
def test_key_text_is_identical(key: object) -> None:
    assert keyed._key_json(key) == key_to_json(key)


def test_bulk_parse_equals_per_cell_parse_and_falls_back_on_a_bad_cell() -> None:
    texts = ["1", '"a"', "[1,2]", '{"tuple":[1,"a"]}', "NaN", "null"]
    parsed = keyed._bulk_json(texts)
    assert parsed[:4] == [1, "a", [1, 2], {"tuple": [1, "a"]}] and parsed[5] is None
    assert keyed._bulk_keys(['{"tuple":[1,"a"]}', "3", "true"]) == [(1, "a"), 3, True]
    with pytest.raises(ValueError):
        keyed._bulk_json(["1", "[1"])  # a torn cell raises, it is not mis-parsed


def test_a_cell_holding_two_values_is_not_silently_split() -> None:
    with pytest.raises(ValueError):
        keyed._bulk_json(["1,2", "3"])
