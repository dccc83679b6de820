"""Review of the landing zone's watcher (``triggers/landing.py``, ``PrefixSource.unread_files``):
hash partitions, ignored names, deleted and rewritten files, a compacted manifest, a 10,000-file
backlog against the triggerer's event loop, a fresh store, a job module that raises on import and a
landing zone in process memory."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from epochal_airflow.config import EpochalSettings
from epochal_airflow.dag_factory import build_epoch_dag
from epochal_airflow.triggers.landing import (
    LandingWatchError,
    NewLandingFilesTrigger,
    load_landing_source,
)

from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from state_store.clocks import SystemClock
from state_store.storage import open_store
from tests.unit.review21c import watch_jobs

REF = "tests.unit.review21c.watch_jobs:hashed"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(watch_jobs.ROOT_ENV, str(tmp_path))
    (tmp_path / "landing").mkdir()
    return tmp_path


def drop(name: str, ids: list[int], mtime_s: float | None = None) -> Path:
    path = watch_jobs.root() / "landing" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "event_time": "2026-11-26T10:00:00Z"}) + "\n" for i in ids))
    if mtime_s is not None:
        os.utime(path, (mtime_s, mtime_s))
    return path


def epoch() -> str:
    store = (watch_jobs.root() / "store").as_uri()
    return run_cycle(watch_jobs.hashed(), store, SystemClock(), executor="local").status


def unread() -> list[str]:
    _, source = load_landing_source(REF, "drops")
    return [f.path for f in source.unread_files().files]


def test_hash_partitions_see_every_file_and_names_starting_with_underscore_or_dot_never_count(
    root: Path,
) -> None:
    for name in ("_SUCCESS", ".part-0.json.crc", "_temporary/0/a.json", "day/.hidden/b.json", ".c.json"):
        drop(name, [9])
    assert unread() == []  # nothing a Spark file source would read: the watcher stays quiet
    for i in range(8):
        drop(f"day/f{i}.json", [i], mtime_s=1_700_000_000 + i)
    assert unread() == [f"day/f{i}.json" for i in range(8)]  # oldest first, across the 4 partitions


def test_read_deleted_compacted_and_rewritten_files_are_not_unread(root: Path) -> None:
    for i in range(5):  # older than max_file_age_ms: the epoch admits them and folds them into floors
        drop(f"old{i}.json", [i], mtime_s=1_700_000_000 + i)
    now = time.time()
    for i in range(3):  # recent: kept in the heads' seen lists
        drop(f"new{i}.json", [10 + i], mtime_s=now - 10 + i)
    assert epoch() == "completed"
    heads = [json.loads(p.read_text())["body"] for p in (root / "store").rglob("heads/*.json")]
    assert all(h["floor_ms"] for h in heads) and any(h["seen"] for h in heads), heads
    assert unread() == []  # floored and seen files both count as read
    os.utime(root / "landing" / "new1.json", (now, now))  # rewritten in place after admission
    assert unread() == []  # never announced (the round reports it and never admits it again)
    gone = drop("late.json", [7])
    assert unread() == ["late.json"]
    gone.unlink()  # deleted after the event: nothing waits, the next epoch has nothing to read
    assert unread() == []
    assert epoch() == "skipped"
    out = read_committed(open_store((root / "store").as_uri()), "hashed", "out")
    assert sorted(out.column("id").to_pylist()) == [0, 1, 2, 3, 4, 10, 11, 12]


def test_watching_a_fresh_store_writes_nothing_into_it(root: Path) -> None:
    drop("f0.json", [1])
    assert unread() == ["f0.json"]
    written = [p for p in (root / "store").rglob("*") if p.is_file()]
    assert written == [], "the watcher wrote into the job's store before any epoch"
    assert epoch() == "completed"  # the job's own trigger still records the source


def test_a_ten_thousand_file_backlog_is_listed_off_the_triggerer_loop(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing of a 10,000-file backlog (about 0.1 s) runs in a worker thread, never on the
    triggerer's event loop (which warns when blocked for 0.2 s): checked by the thread the work
    runs on, not by timing, so a loaded machine cannot make it flaky."""
    from epochal_airflow.triggers import landing

    landing_dir = root / "landing"
    body = json.dumps({"id": 1, "event_time": "2026-11-26T10:00:00Z"}) + "\n"
    for i in range(10_000):
        (landing_dir / f"f{i:05d}.json").write_text(body)
    threads: list[str] = []
    real_summary, real_load = landing.unread_summary, landing.load_landing_source

    def summary(*args: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        return real_summary(*args)

    def load(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_load(*args)

    monkeypatch.setattr(landing, "unread_summary", summary)
    monkeypatch.setattr(landing, "load_landing_source", load)

    async def main() -> dict[str, Any]:
        events = NewLandingFilesTrigger(REF, "drops", 0.01).run()
        event = await anext(events)
        await events.aclose()
        return dict(event.payload)

    payload = asyncio.run(asyncio.wait_for(main(), 60))
    assert payload["files"] == 10_000
    assert len(threads) >= 2 and threading.main_thread().name not in threads, threads


def test_a_job_module_that_raises_on_import_is_one_line_naming_it(root: Path) -> None:
    ref = "tests.unit.review21c.raising_job:job"
    with pytest.raises(LandingWatchError) as caught:
        load_landing_source(ref, "drops")
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot load job {ref!r} (RuntimeError: ORDERS_BUCKET is not set)" in message
    assert "triggerer" in message

    async def first_event() -> Any:
        return await anext(NewLandingFilesTrigger(ref, "drops", 0.01).run())

    with pytest.raises(LandingWatchError, match="cannot load job"):
        asyncio.run(first_event())


def test_a_landing_zone_in_process_memory_is_refused_by_the_watch_and_the_dag(root: Path) -> None:
    ref = "tests.unit.review21c.watch_jobs:in_memory"
    with pytest.raises(
        LandingWatchError, match=r"landing zone memory://review21c-landing .*triggerer cannot see"
    ):
        load_landing_source(ref, "drops")
    settings = EpochalSettings.from_env(
        {"AIRFLOW_HOME": str(root), "EPOCHAL_JOBS": ref, "EPOCHAL_SCHEDULE": "assets"}
    )
    with pytest.raises(LandingWatchError, match=r"memory://review21c-landing"):
        build_epoch_dag(ref, settings)
