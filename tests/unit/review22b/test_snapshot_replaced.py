"""An approved restore plan names bytes, not only a savepoint's name (issue 22 review): a savepoint
disposed and re-taken, or copied over, under the same name with the same shape gives a plan whose
JSON is identical -- the approval must still not apply to the other bytes. Real local stores and
real epochs (in process, on a manual clock); no Airflow needed for the decision itself."""

from __future__ import annotations

import shutil
from pathlib import Path

from epochal_airflow.hooks.store import EpochalRuntime
from epochal_airflow.operators.approval import plan_ticket

from spark_jobs.lifecycle.restore import RestoreRequest
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.lifecycle.snapshots import savepoint_location
from state_store.clocks import ManualClock
from state_store.core.ports import NO_KILL
from state_store.core.restore import plan_from_json
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, cycle, new_clock, small_job


def store_with_savepoint(root: Path, events_per_second: int) -> str:
    """Job clickstream, two epochs of ``events_per_second`` input, then savepoint ``sp``."""
    uri = root.as_uri()
    job, clock = small_job(events_per_second=events_per_second), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    clock.advance(STEP_MS)
    take_savepoint(job, uri, clock, "sp")
    return uri


def runtime(uri: str) -> EpochalRuntime:
    return EpochalRuntime(small_job(), open_store(uri), uri, ManualClock(10**12), NO_KILL)


def test_a_savepoint_replaced_under_the_same_name_is_not_the_approved_plan(tmp_path: Path) -> None:
    uri = store_with_savepoint(tmp_path / "prod", 40)
    other = store_with_savepoint(tmp_path / "staging", 80)  # same job, same shape, other state
    location = savepoint_location(uri, "clickstream", "sp")
    request = RestoreRequest(source=location, dry_run=True)
    approved = plan_ticket(runtime(uri), request, None, "r1")
    same = plan_ticket(runtime(uri), request, None, "r1")  # the same bytes: still the approved plan
    assert approved.refusal(same.position, plan_from_json(same.plan), same.snapshot_digest) is None

    folder = Path(location.removeprefix("file://"))
    shutil.rmtree(folder)  # "dispose" it, then put other bytes under the same name
    shutil.copytree(Path(savepoint_location(other, "clickstream", "sp").removeprefix("file://")), folder)
    now = plan_ticket(runtime(uri), request, None, "r1")

    assert now.plan == approved.plan and now.position == approved.position  # the plan looks the same
    refusal = approved.refusal(now.position, plan_from_json(now.plan), now.snapshot_digest)
    assert refusal == (
        f"the snapshot at {location} is not the one approved for job clickstream (replaced or altered "
        "since the plan): nothing was restored; trigger epochal_restore again to review a new plan"
    )


def test_an_approved_checkpoint_removed_by_retention_refuses_with_one_line(tmp_path: Path) -> None:
    from spark_jobs.lifecycle.snapshots import SnapshotError
    from state_store.core import JobLayout

    uri = store_with_savepoint(tmp_path / "prod", 40)
    request = RestoreRequest(source="1", dry_run=True)
    approved = plan_ticket(runtime(uri), request, None, "r1")
    assert approved.source == "1" and approved.lossy  # a rewind from 2 (3 is the savepoint's)
    store, layout = open_store(uri), JobLayout("clickstream")
    for info in list(store.list(layout.checkpoint_dir(1))):
        store.delete(info.key)
    try:
        plan_ticket(runtime(uri), request, None, "r1")
    except SnapshotError as exc:
        message = str(exc)
    else:
        raise AssertionError("a removed checkpoint was planned")
    assert "checkpoint 1 of job clickstream was not found" in message and "\n" not in message
