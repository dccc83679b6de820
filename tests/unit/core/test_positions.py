"""BarrierPositions: the typed view of a checkpoint's ``positions`` reads every shape the protocol
writes and writes it back unchanged; a malformed one is refused with the field named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_store.core.codec import ManifestError
from state_store.core.positions import BarrierPositions, RestoreFollowUp

EPOCH = {"ranges": {"events/p0": [0, 10], "events/p1": [5, 5]}, "base": 3}
IMPORT = {
    "ranges": {"events/p0": [10, 10]},
    "base": None,
    "restored_from": "file:///sp/one",
    "restore_follow_up": {"retract_after": 4, "pin": 2},
}


@pytest.mark.parametrize("raw", [EPOCH, IMPORT, {"ranges": {}, "base": None, "custom": {"x": 1}}])
def test_stored_positions_round_trip_unchanged(raw: dict[str, object]) -> None:
    assert BarrierPositions.of(raw).to_json() == raw


def test_the_fields_a_reader_needs() -> None:
    epoch, imported = BarrierPositions.of(EPOCH), BarrierPositions.of(IMPORT)
    assert (epoch.base, epoch.is_import, epoch.end("events/p0"), epoch.end("other/p9")) == (3, False, 10, 0)
    assert epoch.ends() == {"events/p0": 10, "events/p1": 5}
    assert imported.is_import and imported.base is None
    assert imported.follow_up == RestoreFollowUp(retract_after=4, pin=2)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"ranges": {"e/p0": [3]}}, "range of 'e/p0'"),
        ({"ranges": {"e/p0": [5, 2]}}, "starts after it ends"),
        ({"ranges": {"e/p0": [True, 2]}}, "range of 'e/p0'"),
        ({"base": "3"}, "base '3' is not a checkpoint id"),
    ],
)
def test_a_malformed_positions_object_is_refused_with_the_field_named(
    raw: dict[str, object], words: str
) -> None:
    with pytest.raises(ManifestError, match=words):
        BarrierPositions.of(raw, what="checkpoint 7 positions")


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.tuples(st.integers(0, 2**40), st.integers(0, 2**20)).map(lambda t: [t[0], t[0] + t[1]]),
        max_size=6,
    ),
    st.one_of(st.none(), st.integers(1, 10**6)),
)
def test_any_valid_ranges_round_trip(ranges: dict[str, list[int]], base: int | None) -> None:
    raw = {"ranges": ranges, "base": base}
    parsed = BarrierPositions.of(raw)
    assert parsed.to_json() == raw and BarrierPositions.of(parsed.to_json()) == parsed
