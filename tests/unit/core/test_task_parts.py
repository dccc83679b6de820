"""TaskParts: the typed view of a task's snapshot reads what every kind of task writes and writes
it back unchanged; a part of the wrong type is refused with the part named."""

from __future__ import annotations

import pytest

from state_store.core.codec import ManifestError
from state_store.core.manifests import AckRecord, TaskId
from state_store.core.task_parts import SourcePart, TaskParts

SOURCE = {"source": {"partition": "p0", "max_ts": 1_700_000_004_000, "position": 12}, "dead_letters": {}}
STATE = {
    "state_files": {"3": {"files": []}},
    "timers": {"3": {"window": [[1, 2]]}},
    "extra": {},
    "channel_state": {"key": "k", "size": 1, "sha256": "0" * 64, "rows": 1},
}
SINK = {"sink_transactions": [{"txn": "t1"}]}


@pytest.mark.parametrize("raw", [SOURCE, STATE, SINK, {}, {"future_part": [1, 2]}])
def test_every_kind_of_task_snapshot_round_trips(raw: dict[str, object]) -> None:
    assert TaskParts.of(raw).to_json() == raw


def test_the_parts_a_reader_asks_for() -> None:
    source = TaskParts.of(SOURCE)
    assert source.is_source and not source.is_sink
    assert source.source == SourcePart("p0", 12, 1_700_000_004_000)
    assert TaskParts.of(SINK).is_sink and TaskParts.of(STATE).channel_state is not None
    ack = AckRecord(4, TaskId("events", 0), 1, 1, snapshot=SOURCE)
    assert ack.parts.source is not None and ack.parts.source.position == 12


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"source": [1]}, "part 'source' must be an object"),
        ({"source": {"partition": "p0", "position": "12"}}, "no integer position"),
        ({"sink_transactions": {"t": 1}}, "'sink_transactions' must be a list"),
        ({"state_files": [1]}, "part 'state_files' must be an object"),
    ],
)
def test_a_part_of_the_wrong_type_is_refused_with_its_name(raw: dict[str, object], words: str) -> None:
    with pytest.raises(ManifestError, match=words):
        TaskParts.of(raw, what="ack of events/0")
