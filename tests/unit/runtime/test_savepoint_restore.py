"""Savepoints and restore end to end: a relocated savepoint restores like one in place; the
restore matrix (rename with a uid map, added and removed operators, rescale, incompatible state,
foreign job, NO_CLAIM leaves the snapshot untouched); dry runs change nothing."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.specs import WindowSpec
from spark_jobs.api.windows import Count, TumblingEventTimeWindows
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.restore_render import render_plan
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.lifecycle.snapshots import SnapshotError, read_savepoint
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core.restore import RestorePlanError
from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, final_state, new_clock, small_job


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".epochal-internal" not in p.parts
    }


def run_epochs(job: Job, uri: str, clock: object, n: int) -> None:
    for _ in range(n):
        clock.advance(STEP_MS)  # type: ignore[attr-defined]
        assert cycle(job, uri, clock).status == "completed"  # type: ignore[arg-type]


@pytest.fixture
def savepoint(tmp_path: Path) -> tuple[str, str, object]:
    uri = (tmp_path / "prod").as_uri()
    job, clock = small_job(), new_clock()
    run_epochs(job, uri, clock, 3)
    info = take_savepoint(job, uri, clock, "before-upgrade")
    return uri, info["location"], clock


def test_relocated_savepoint_restores_like_in_place_and_reads_with_pandas(savepoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _uri, location, _clock = savepoint
    moved = tmp_path / "elsewhere" / "sp"
    shutil.copytree(location.removeprefix("file://"), moved)
    frame = pd.read_parquet(moved / "dedup" / "state.parquet")  # plain pandas, no Epochal
    assert len(frame) > 100 and {"key_group", "state", "key", "value"} <= set(frame.columns)

    results = []
    for name, source in (("in-place", location), ("relocated", moved.as_uri())):
        target = (tmp_path / name).as_uri()
        job, job_clock = small_job(), new_clock()
        job_clock.advance(3 * STEP_MS)
        report = restore(job, target, job_clock, RestoreRequest(source=source))
        assert report.plan.ok and report.checkpoint_id is not None
        run_epochs(job, target, job_clock, 2)
        results.append((committed_rows(target, job), final_state(target, job)))
    assert results[0] == results[1]
    assert len(results[0][0]) > 0


def test_restore_matrix(savepoint, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _uri, location, _clock = savepoint
    snapshot = read_savepoint(location)
    sp_dir = Path(location.removeprefix("file://"))
    before = tree_digest(sp_dir)

    def attempt(job: Job, **request: object) -> object:
        target = (tmp_path / f"t{len(list(tmp_path.iterdir()))}").as_uri()
        return restore(job, target, new_clock(), RestoreRequest(source=location, **request))  # type: ignore[arg-type]

    # renamed uid: refused without a mapping, restored with one
    renamed = small_job()
    next(s for s in renamed.graph.steps if s.uid == "dedup").uid = "dedup-v2"
    with pytest.raises(RestorePlanError, match="dedup"):
        attempt(renamed)
    report = attempt(renamed, uid_map={"dedup": "dedup-v2"})
    assert report.plan.row("dedup-v2").old_uid == "dedup"  # type: ignore[attr-defined]

    # removed stateful operator: refused unless allow_non_restored_state
    smaller = Job("clickstream", parallelism=2, max_parallelism=16)
    src = GeneratorSource(
        uid="clicks",
        partitions=2,
        events_per_second=40,
        out_of_orderness_ms=2_000,
        duplicate_fraction=0.05,
        keys=200,
        seed=7,
        start_ms=DEFAULT_START_MS,
    )
    smaller.source(src, uid="clicks", out_of_orderness_ms=2_000).key_by("event_id").deduplicate(
        ttl_ms=3_600_000, uid="dedup"
    ).sink(ParquetSink(), uid="page-counts-sink")
    with pytest.raises(RestorePlanError, match="allow_non_restored_state"):
        attempt(smaller)
    assert attempt(smaller, allow_non_restored_state=True).plan.ok  # type: ignore[attr-defined]

    # added operator: starts empty
    added = Job("clickstream", parallelism=2, max_parallelism=16)
    added.source(src, uid="clicks").key_by("page").window(
        TumblingEventTimeWindows(5_000), Count(), uid="fresh"
    ).sink(ParquetSink(), uid="out")
    report = attempt(added, allow_non_restored_state=True)
    assert report.plan.row("fresh").action == "new"  # type: ignore[attr-defined]

    # incompatible state: the same uid now holds another kind of state
    clash = Job("clickstream", parallelism=2, max_parallelism=16)
    clash.source(src, uid="clicks").key_by("page").window(
        TumblingEventTimeWindows(5_000), Count(), uid="dedup"
    ).sink(ParquetSink(), uid="out")
    from spark_jobs.api.windows import EventTimeSessionWindows

    step = next(s for s in clash.graph.steps if s.uid == "dedup")
    assert isinstance(step.spec, WindowSpec)
    step.spec = dataclasses.replace(step.spec, assigner=EventTimeSessionWindows(10))
    with pytest.raises(RestorePlanError, match="seen"):
        attempt(clash, allow_non_restored_state=False)

    # a savepoint of another job needs allow_foreign
    other = small_job()
    other.job_id = "another-job"
    with pytest.raises(RestorePlanError, match=r"another job|allow_foreign"):
        attempt(other)

    # dry run: a plan and no writes; NO_CLAIM: the savepoint folder is byte-for-byte untouched
    target = tmp_path / "dry"
    report = restore(small_job(), target.as_uri(), new_clock(), RestoreRequest(source=location, dry_run=True))
    assert report.checkpoint_id is None and "dedup" in render_plan(report.plan)
    assert not target.exists() or not any(
        p.is_file() for p in target.rglob("*") if ".epochal-internal" not in p.parts
    )
    assert tree_digest(sp_dir) == before
    assert snapshot.operators["dedup"].keyed is not None


def test_missing_or_damaged_savepoint_is_refused_with_a_reason(tmp_path: Path, savepoint) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SnapshotError, match=r"_metadata\.json is missing"):
        read_savepoint((tmp_path / "nothing").as_uri())
    _uri, location, _ = savepoint
    damaged = tmp_path / "damaged"
    shutil.copytree(location.removeprefix("file://"), damaged)
    (damaged / "dedup" / "state.parquet").write_bytes(b"garbage")
    with pytest.raises(SnapshotError, match="does not match its manifest"):
        read_savepoint(damaged.as_uri())


def test_rescale_4_to_2_and_8_restores_identical_state_per_key(tmp_path: Path) -> None:
    uri = (tmp_path / "wide").as_uri()
    job, clock = small_job(parallelism=4), new_clock()
    run_epochs(job, uri, clock, 3)
    location = take_savepoint(job, uri, clock, "wide")["location"]
    expected = read_savepoint(location)
    for p in (2, 8):
        target = (tmp_path / f"p{p}").as_uri()
        narrow = small_job(parallelism=p)
        report = restore(narrow, target, clock, RestoreRequest(source=location))
        assert {r.action for r in report.plan.rows if r.uid == "dedup"} == {"rescale"}
        assert cycle(narrow, target, clock, force=True).status == "completed"  # a checkpoint at p
        state = final_state(target, narrow)
        for uid, op in expected.operators.items():
            rows = op.keyed.num_rows if op.keyed else 0
            assert len([r for r in state[uid] if r[0] != "timers"]) == rows, uid


def test_no_claim_restore_pins_the_checkpoint_and_claim_does_not(tmp_path: Path) -> None:
    from state_store.core import JobLayout, load_completed
    from state_store.storage import open_store

    for mode in ("NO_CLAIM", "CLAIM"):
        uri = (tmp_path / mode).as_uri()
        job, clock = small_job(), new_clock()
        run_epochs(job, uri, clock, 2)
        store = open_store(uri)
        restore(job, uri, clock, RestoreRequest(source="1", claim_mode=mode))
        run_epochs(job, uri, clock, 5)  # retention keeps 3: checkpoint 1 is long out of the window
        kept = store.head(JobLayout("clickstream").metadata(1)) is not None
        assert kept == (mode == "NO_CLAIM"), mode
        if kept:
            load_completed(store, JobLayout("clickstream"), 1, deep=True)


def test_stop_with_savepoint_halts_epochs_until_a_restore(tmp_path: Path) -> None:
    uri = (tmp_path / "stop").as_uri()
    job, clock = small_job(), new_clock()
    run_epochs(job, uri, clock, 2)
    info = take_savepoint(job, uri, clock, "final", stop=True)
    clock.advance(STEP_MS)
    report = cycle(job, uri, clock)
    assert report.status == "stopped" and "final" in report.reason and "restore" in report.reason
    restore(job, uri, clock, RestoreRequest(source=info["location"]))
    assert cycle(job, uri, clock).status == "completed"


def test_a_savepoint_entry_under_the_wrong_key_group_is_refused_at_import(tmp_path: Path, savepoint) -> None:  # type: ignore[no-untyped-def]
    """State enters checkpoints through a savepoint import, which checks every entry's key group:
    restores from checkpoints then trust them (``OperatorRestore.trusted_key_groups``)."""
    from spark_jobs.lifecycle.snapshots import SAVEPOINT_KIND, _Body
    from state_store.core.codec import decode_document, encode_document
    from state_store.core.state.snapshot import KeyedStateSnapshot
    from state_store.formats.keyed import read_state_file, write_state_file

    _uri, location, _ = savepoint
    moved = tmp_path / "moved"
    shutil.copytree(location.removeprefix("file://"), moved)
    path = moved / "dedup" / "state.parquet"
    state = read_state_file(path)
    first, second = sorted(state.key_groups)[:2]
    groups = dict(state.key_groups)
    groups[first], groups[second] = groups[second], groups[first]  # filed where they do not hash to
    write_state_file(
        path, KeyedStateSnapshot(state.max_parallelism, state.key_group_range, state.kinds, groups)
    )
    manifest = moved / "_metadata.json"
    body = decode_document(manifest.read_bytes(), SAVEPOINT_KIND, _Body, key="m").body
    data = path.read_bytes()
    body["operators"]["dedup"]["state"].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest.write_bytes(encode_document(SAVEPOINT_KIND, _Body(body)))
    with pytest.raises(
        SnapshotError,
        match=r"savepoint file .*dedup/state\.parquet cannot be restored: .*under key group \d+, but",
    ):
        read_savepoint(moved.as_uri())
    job, clock = small_job(), new_clock()
    target = (tmp_path / "target").as_uri()
    with pytest.raises(SnapshotError, match="cannot be restored"):
        restore(job, target, clock, RestoreRequest(source=moved.as_uri()))
    assert not (tmp_path / "target").exists() or not any((tmp_path / "target").rglob("_metadata.json"))
