"""The landing zone's Airflow Asset (``triggers/landing.py``): its watcher fires while settled files
wait unread, once per change, so a backlog drains epoch after epoch and nothing storms; it survives
a failed listing; it reads the manifest without writing it; and ``EPOCHAL_SCHEDULE=assets`` puts it
on the DAG's schedule, serialized as Airflow stores it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.serialization.serialized_objects import DagSerialization
from epochal_airflow.config import EpochalConfigError, EpochalSettings
from epochal_airflow.dag_factory import build_epoch_dag
from epochal_airflow.triggers.landing import LandingWatchError, NewLandingFilesTrigger, load_landing_source

from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from state_store.clocks import SystemClock
from state_store.storage import open_store
from tests.unit.airflow import landing_watch_job as watched

REF = "tests.unit.airflow.landing_watch_job:job"
POLL = 0.02


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(watched.ROOT_ENV, str(tmp_path))
    return tmp_path


def epoch() -> str:
    return run_cycle(
        watched.job(), (watched.root() / "store").as_uri(), SystemClock(), executor="local"
    ).status


def read_ids() -> list[int]:
    table = read_committed(open_store((watched.root() / "store").as_uri()), "watched", "out")
    return sorted(table.column("id").to_pylist())


Step = Callable[[], Awaitable[list[dict[str, Any]]]]


def watching(trigger: NewLandingFilesTrigger, scenario: Callable[[Step], Awaitable[None]]) -> None:
    """Run ``trigger`` in the background while ``scenario`` acts; ``scenario``'s argument waits a
    dozen polls and returns the events fired since it was last called."""

    async def main() -> None:
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def pump() -> None:
            async for event in trigger.run():
                events.put_nowait(dict(event.payload))

        task = asyncio.create_task(pump())

        async def fired() -> list[dict[str, Any]]:
            await asyncio.sleep(POLL * 12)
            if task.done():
                task.result()  # re-raise what ended the watch
            out = []
            while not events.empty():
                out.append(events.get_nowait())
            return out

        try:
            await scenario(fired)
        finally:
            task.cancel()

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_drop_fires_once_and_a_backlog_drains_epoch_after_epoch(root: Path) -> None:
    async def scenario(fired: Step) -> None:
        assert await fired() == []  # an empty landing zone: nothing to announce
        watched.drop("a", "one.json", [1, 2])
        (event,) = await fired()
        assert (event["job_id"], event["source"], event["files"], event["oldest"]) == (
            "watched",
            "drops",
            1,
            "a/one.json",
        )
        assert await fired() == []  # the same backlog under the same manifest: no storm
        assert await asyncio.to_thread(epoch) == "skipped"  # the first listing only sees the file
        (again,) = await fired()  # ... which moved the manifest: announce once more
        assert again["files"] == 1 and again["digest"] != event["digest"]
        assert await asyncio.to_thread(epoch) == "completed"  # the second admits it
        assert await fired() == []
        for name in ("two.json", "three.json"):
            watched.drop("b", name, [len(name)])
        watched.drop("a", "four.json", [4])
        assert [e["files"] for e in await fired()] == [3]
        epochs = 0
        while await fired() or epochs == 0:  # what an asset-scheduled DAG does with the events
            await asyncio.to_thread(epoch)
            epochs += 1
            assert epochs <= 8, "the backlog did not drain"
        assert sorted(await asyncio.to_thread(read_ids)) == [1, 2, 4, 8, 10]  # max one file per epoch

    watching(NewLandingFilesTrigger(REF, "drops", POLL), scenario)


def test_a_failed_listing_is_retried_and_the_watch_goes_on(
    root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_jobs.sources.prefix import PrefixSource

    real = PrefixSource.unread_files
    outage = {"left": 3}

    def flaky(self: PrefixSource) -> Any:
        if outage["left"]:
            outage["left"] -= 1
            raise OSError("connection refused by 127.0.0.1:8333")
        return real(self)

    monkeypatch.setattr(PrefixSource, "unread_files", flaky)
    watched.drop("a", "one.json", [1])

    async def scenario(fired: Step) -> None:
        assert [e["files"] for e in await fired()] == [1]

    with caplog.at_level(logging.WARNING, logger="epochal_airflow.triggers.landing"):
        watching(NewLandingFilesTrigger(REF, "drops", POLL), scenario)
    assert outage["left"] == 0
    assert "landing watch of watched.drops: listing failed (connection refused" in caplog.text


def test_watching_reads_the_manifest_and_writes_nothing(root: Path) -> None:
    watched.drop("a", "one.json", [1])
    assert epoch() == "skipped"  # the manifest exists and has seen the file once
    store = open_store((root / "store").as_uri())
    before = {i.key: i.version for i in store.list("")}
    _, source = load_landing_source(REF, "drops")
    for _ in range(3):
        unread = source.unread_files()
        assert [f.path for f in unread.files] == ["a/one.json"]
    assert {i.key: i.version for i in store.list("")} == before


def test_a_reference_that_cannot_be_watched_is_one_line_naming_it(root: Path) -> None:
    with pytest.raises(
        LandingWatchError, match=r"job watched .* has no source 'orders' \(it has drops\): redeploy"
    ):
        load_landing_source(REF, "orders")
    with pytest.raises(
        LandingWatchError,
        match=r"source 'clicks' of job clickstream \(GeneratorSource\).*only a PrefixSource",
    ):
        load_landing_source("clickstream", "clicks")


def test_the_assets_schedule_watches_the_landing_zone_and_serializes(root: Path) -> None:
    settings = EpochalSettings.from_env(
        {
            "AIRFLOW_HOME": str(root),
            "EPOCHAL_JOBS": REF,
            "EPOCHAL_SCHEDULE": "assets",
            "EPOCHAL_LANDING_POLL_S": "5",
        }
    )
    dag = build_epoch_dag(REF, settings)
    (asset,) = dag.timetable.asset_condition.objects
    assert asset.uri == (root / "landing").as_uri() and asset.name == "watched.drops"
    (watcher,) = asset.watchers
    assert watcher.name == "watched.drops.files"
    classpath, kwargs = watcher.trigger.serialize()
    assert kwargs == {"job_ref": REF, "source_uid": "drops", "poll_interval": 5.0}
    assert classpath == "epochal_airflow.triggers.landing.NewLandingFilesTrigger"
    serialized = DagSerialization.to_dict(dag)  # what the dag processor stores
    assert "NewLandingFilesTrigger" in str(serialized) and REF in str(serialized)
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(
            EpochalConfigError, match=r"EPOCHAL_LANDING_POLL_S=.* is invalid: use the seconds"
        ):
            EpochalSettings.from_env({"AIRFLOW_HOME": str(root), "EPOCHAL_LANDING_POLL_S": bad})
    cron = build_epoch_dag(
        REF, EpochalSettings.from_env({"AIRFLOW_HOME": str(root), "EPOCHAL_SCHEDULE": "@hourly"})
    )
    assert type(cron.timetable).__name__ != "AssetTriggeredTimetable"
