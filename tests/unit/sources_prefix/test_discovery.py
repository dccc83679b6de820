"""The discovery rules as pure functions: known files, settling, caps, and the compaction that bounds
a partition's head without ever hiding a file that was not read."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.sources.prefix_discovery import Listed, Rules, classify, compact, is_known, next_head, select
from spark_jobs.sources.prefix_manifest import Chunk, FileEntry, Head, Seen

RULES = Rules(
    settle_ms=10,
    confirm_listing=True,
    max_files=None,
    max_bytes=None,
    max_file_age_ms=100,
    max_tracked_files=1_000,
)


def listed(path: str, modified_ms: int, size: int = 1, partition: str = "p0") -> Listed:
    return Listed(path, partition, size, f"v-{path}-{size}", modified_ms)


def chunk_of(head: Head, files: list[Listed]) -> Chunk | None:
    if not files:
        return None
    entries = tuple(
        FileEntry(f.path, head.end + i, 1, f.size, f.version, f.modified_ms, "0" * 64)
        for i, f in enumerate(files)
    )
    return Chunk(head.partition, head.seq + 1, head.end, head.end + len(files), entries)


def round_(head: Head, listing: list[Listed], now: int, rules: Rules = RULES) -> tuple[Head, list[Listed]]:
    """One discovery round of one partition; returns the new head and what it admitted."""
    view = classify(head, listing, now, rules)
    taken = select({head.partition: view}, rules)[head.partition]
    names = {f.path for f in taken}
    unadmitted = [f for f in (*view.candidates, *view.waiting) if f.path not in names]
    return next_head(head, chunk_of(head, taken), unadmitted, now, rules), taken


def test_a_file_is_admitted_once_settled_and_seen_unchanged_then_known() -> None:
    head = Head("p0")
    a = listed("a", modified_ms=0)
    head, taken = round_(head, [a], now=5)
    assert taken == [] and [p.path for p in head.pending] == ["a"]  # young
    head, taken = round_(head, [a], now=10)
    assert taken == [a] and head.pending == () and head.end == 1
    head, taken = round_(head, [a], now=20)
    assert taken == [] and head.end == 1


def test_a_known_file_listed_with_a_newer_time_is_reported_as_rewritten() -> None:
    head = Head("p0", seen=(Seen("a", 5),))
    view = classify(head, [listed("a", 7), listed("b", 0)], 50, RULES)
    assert view.rewritten == ("a",)
    assert [f.path for f in view.waiting] == ["b"]  # not confirmed by an earlier listing yet


def test_select_takes_the_oldest_first_across_partitions_under_the_caps() -> None:
    files = [
        listed("z", 1, 5, "p0"),
        listed("a", 2, 5, "p1"),
        listed("b", 2, 5, "p0"),
        listed("c", 3, 5, "p1"),
    ]
    views = {
        "p0": classify(
            Head("p0"), [f for f in files if f.partition == "p0"], 100, replace(RULES, confirm_listing=False)
        ),
        "p1": classify(
            Head("p1"), [f for f in files if f.partition == "p1"], 100, replace(RULES, confirm_listing=False)
        ),
    }
    by_files = select(views, replace(RULES, max_files=3))
    assert [f.path for f in by_files["p0"]] == ["z", "b"] and [f.path for f in by_files["p1"]] == ["a"]
    by_bytes = select(views, replace(RULES, max_bytes=12))
    assert sum(len(v) for v in by_bytes.values()) == 2
    assert sum(len(v) for v in select(views, replace(RULES, max_bytes=1)).values()) == 1  # one always fits


def test_compaction_folds_old_entries_into_the_floor() -> None:
    head = Head("p0", seen=tuple(Seen(f"f{m:03d}", m) for m in range(100)))
    compacted = compact(head, [], now_ms=150, rules=RULES)
    assert compacted.floor_ms == 50 and compacted.floor_path == "f050"
    assert [s.modified_ms for s in compacted.seen] == list(range(51, 100))
    seen = {s.path: s.modified_ms for s in compacted.seen}
    assert all(is_known(compacted, f"f{m:03d}", m, seen) for m in range(100))
    assert not is_known(compacted, "f999", 10, seen)  # a path beyond the floor is new
    assert not is_known(compacted, "f000", 60, seen)  # a newer file is new


def test_max_tracked_files_bounds_the_seen_entries() -> None:
    head = Head("p0", seen=tuple(Seen(f"f{m:03d}", 1_000 + m) for m in range(100)))
    compacted = compact(head, [], now_ms=1_000, rules=replace(RULES, max_tracked_files=30))
    assert len(compacted.seen) == 30


def test_compaction_never_hides_a_listed_file_that_was_not_admitted() -> None:
    head = Head("p0", seen=tuple(Seen(f"f{m:03d}", m) for m in range(100)))
    waiting = listed("a", 20)  # sorts before every seen path, older than the cutoff
    compacted = compact(head, [waiting], now_ms=150, rules=RULES)
    assert compacted.floor_ms == 19
    assert not is_known(compacted, "a", 20, {s.path: s.modified_ms for s in compacted.seen})
    # a floor already above the waiting file's time would cover it once its path is reached: skipped
    high = Head("p0", floor_path="b", floor_ms=30, seen=(Seen("c", 25),))
    assert compact(high, [listed("bb", 20)], now_ms=1_000, rules=RULES) == high


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=40
    ),  # (path id, round it appears)
    max_files=st.one_of(st.none(), st.integers(1, 4)),
    tracked=st.integers(1, 6),
)
def test_with_aggressive_compaction_every_file_is_admitted_exactly_once(
    arrivals: list[tuple[int, int]], max_files: int | None, tracked: int
) -> None:
    rules = replace(RULES, max_files=max_files, max_file_age_ms=15, max_tracked_files=tracked)
    files: dict[str, int] = {}  # path -> modification time (the time of the round it appeared)
    head, admitted = Head("p0"), []
    for step in range(40):
        now = step * 10
        for path_id, at in arrivals:
            path = f"f{path_id:02d}"
            if at == step and path not in files:
                files[path] = now
        listing = [listed(p, m) for p, m in sorted(files.items())]
        head, taken = round_(head, listing, now + 1, rules)
        admitted += [f.path for f in taken]
    assert sorted(admitted) == sorted(files)  # none lost, none twice
    assert len(head.seen) <= tracked  # nothing waits at the end: the head is compacted to the bound
