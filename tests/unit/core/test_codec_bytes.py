"""The envelope's bytes: compact, sorted JSON written by the C encoder, the body encoded once and
both hashed and embedded -- exactly ``json.dumps(envelope, sort_keys=True, separators=(",", ":"))``,
so that any JSON reader (and the checksum rule of docs/storage-format.md) sees what it expects."""

from __future__ import annotations

import dataclasses
import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.core.codec import (
    canonical_json,
    decode_document,
    encode_document,
    format_version,
    sha256_hex,
    to_jsonable,
)
from state_store.core.manifests import AckRecord, DecisionRecord, Outcome, StateHandle, TaskId

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(
    metrics=st.dictionaries(st.text(max_size=6), JSON, max_size=4),
    snapshot=st.dictionaries(st.text(max_size=6), JSON, max_size=4),
)
def test_bytes_are_the_compact_sorted_envelope_and_decode_back(metrics: dict, snapshot: dict) -> None:  # type: ignore[type-arg]
    record = AckRecord(
        3, TaskId("op", 1), 2, 1, (StateHandle("k", 5, "blake3:" + "ab" * 32),), metrics, snapshot
    )
    data = encode_document("ack", record)
    parsed = json.loads(data)
    envelope = {
        "format_version": format_version("ack"),
        "kind": "ack",
        "body": parsed["body"],
        "sha256": sha256_hex(canonical_json(parsed["body"])),
    }
    assert data == json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert decode_document(data, "ack", AckRecord, key="k") == record


def test_non_ascii_text_is_escaped_as_before() -> None:
    data = encode_document("decision", DecisionRecord(1, Outcome.ABORT, 5, message="Übergröße ☃"))
    assert data.isascii() and b"\\u00dcbergr\\u00f6\\u00dfe \\u2603" in data
    assert decode_document(data, "decision", DecisionRecord, key="k").message == "Übergröße ☃"


class _Color(enum.StrEnum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass(frozen=True)
class _Inner:
    color: _Color
    level: _Level
    pair: tuple[int, float]


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner
    by_id: dict[int, _Inner | None]
    flag: bool
    note: str | None


def test_to_jsonable_turns_enums_subclassing_str_or_int_into_their_values() -> None:
    """Plain values pass through unchanged; an enum that is also a ``str`` or ``int`` is still an
    enum (its value is written, not the member), at any depth."""
    inner = _Inner(_Color.RED, _Level.HIGH, (1, 2.5))
    value = to_jsonable(_Outer(inner, {7: inner, 8: None}, True, None))
    assert value == {
        "inner": {"color": "red", "level": 3, "pair": [1, 2.5]},
        "by_id": {"7": {"color": "red", "level": 3, "pair": [1, 2.5]}, "8": None},
        "flag": True,
        "note": None,
    }
    assert type(value["inner"]["color"]) is str and type(value["inner"]["level"]) is int
    assert type(value["flag"]) is bool
