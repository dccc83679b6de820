"""Restores that wait for a human (issue 22) under real Airflow: ``airflow dags test
epochal_restore`` runs the DAG in a temporary SQLite home while a real ``airflow api-server`` on the
same metadata DB answers the approval through the HITL REST API the Required Actions page uses.

* a lossless restore runs through without waiting (``auto_approve``);
* a lossy one (a rescale) waits in ``awaiting_input`` with the plan and its losses, writing nothing;
  Approve applies exactly it; Reject, or a timeout (the scheduler's own ``awaiting_input`` sweep),
  leaves the store byte-identical;
* an approval given after the job moved on (another epoch completed) is refused with one line and
  writes nothing.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from state_store.core import JobRecords
from state_store.storage import open_store
from tests.integration.airflow.support import airflow_environment, api_server, logical_date
from tests.unit.runtime.support import STEP_MS, cycle, new_clock, small_job

pytestmark = pytest.mark.integration
DAG_ID, TASK = "epochal_restore", "approve_restore"
USER, PASSWORD = "epochal-approver", "test-only-password"


@dataclass
class Airflow:
    env: dict[str, str]
    base: str
    runs: Iterator[int] = field(default_factory=lambda: itertools.count(10))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def token(self) -> str:
        request = urllib.request.Request(
            f"{self.base}/auth/token",
            data=json.dumps({"username": USER, "password": PASSWORD}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.loads(response.read())["access_token"])

    def approval_state(self) -> tuple[str, str] | None:
        """(run_id, state) of the newest ``approve_restore`` task instance, from the metadata DB."""
        with sqlite3.connect(Path(self.env["AIRFLOW_HOME"]) / "airflow.db", timeout=30) as db:
            row = db.execute(
                "SELECT ti.run_id, ti.state FROM task_instance ti JOIN dag_run dr "
                "ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id "
                "WHERE ti.dag_id = ? AND ti.task_id = ? ORDER BY dr.id DESC LIMIT 1",
                (DAG_ID, TASK),
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def start_restore(self, uri: str, log: Path, **conf: Any) -> subprocess.Popen[str]:
        conf = {"dry_run": False, **conf}
        when = logical_date(next(self.runs))  # one metadata DB: a new logical date per run
        return subprocess.Popen(
            [self.env["AIRFLOW_BIN"], "dags", "test", DAG_ID, when, "-c", json.dumps(conf)],
            env={**self.env, "EPOCHAL_STORE_URI": uri},
            stdout=log.open("w"),  # a file, not a pipe: a full pipe would stall the run
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait_for_approval(self, proc: subprocess.Popen[str], log: Path) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = self.approval_state()
            if found is not None and found[1] == "awaiting_input":
                return found[0]
            assert proc.poll() is None, f"the restore run ended without waiting: {log.read_text()[-3000:]}"
            time.sleep(0.3)
        pytest.fail(f"the approval never waited: {log.read_text()[-3000:]}")

    def answer(self, run_id: str, option: str) -> dict[str, Any]:
        status, body = self.call(
            "PATCH",
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK}/-1/hitlDetails",
            {"chosen_options": [option], "params_input": {}},
        )
        assert status == 200, body
        return dict(body)


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    home = tmp_path_factory.mktemp("airflow_approval")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = airflow_environment(
        home,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
    )
    with api_server(env["AIRFLOW_BIN"], env, home) as base:
        yield Airflow(env, base)


def two_epochs(tmp_path: Path) -> str:
    """A store where job clickstream (parallelism 2) completed checkpoints 1 and 2."""
    uri = (tmp_path / "store").as_uri()
    clock = new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(small_job(), uri, clock)
    return uri


def store_bytes(uri: str) -> dict[str, bytes]:
    """Every object of the store, path -> bytes (the listing and the contents)."""
    root = Path(uri.removeprefix("file://"))
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def finish(proc: subprocess.Popen[str], log: Path) -> str:
    proc.wait(timeout=180)
    return log.read_text()


def generation(uri: str) -> int:
    record = JobRecords(open_store(uri), "clickstream").read()
    assert record is not None
    return record.generation


def test_a_lossless_restore_runs_through_without_waiting(airflow: Airflow, tmp_path: Path) -> None:
    uri = two_epochs(tmp_path)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest")
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert "the plan loses nothing; approved (auto_approve)" in logs
    assert "Waiting for Human-in-the-loop input" not in logs
    assert airflow.approval_state() is not None and airflow.approval_state()[1] == "success"  # type: ignore[index]
    assert generation(uri) == 2  # restored once


def test_a_lossy_restore_waits_then_approval_applies_exactly_the_plan_shown(
    airflow: Airflow, tmp_path: Path
) -> None:
    uri = two_epochs(tmp_path)
    before = store_bytes(uri)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    status, detail = airflow.call(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK}/-1/hitlDetails"
    )
    assert status == 200, detail
    assert "loses something" in detail["subject"]
    assert "rescales operator 'page-counts' from 2 to 3 subtasks" in detail["body"]
    assert "UID" in detail["body"] and "2 -> 3" in detail["body"]  # the plan table itself
    assert detail["options"] == ["Approve", "Reject"] and detail["defaults"] == ["Reject"]
    assert store_bytes(uri) == before  # waiting changes nothing
    answered = airflow.answer(run_id, "Approve")
    assert answered["responded_by"]["name"] == USER and answered["chosen_options"] == ["Approve"]
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert f"approved by {USER}" in logs
    assert "approved_by_person=True" in logs and "source=2" in logs  # latest, pinned as shown
    assert generation(uri) == 2
    from state_store.core import CompletedCheckpointStore, JobLayout

    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("clickstream"), 1)
    latest = completed.latest()
    assert latest is not None and latest.checkpoint_id == 3
    assert len([t for t in latest.metadata.tasks if t.task.uid == "page-counts"]) == 3


def test_a_rejected_lossy_restore_changes_nothing(airflow: Airflow, tmp_path: Path) -> None:
    uri = two_epochs(tmp_path)
    before = store_bytes(uri)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    airflow.answer(run_id, "Reject")
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert f"rejected by {USER}; nothing is restored" in logs
    assert "epochal restore:" not in logs  # the restore task was skipped
    assert store_bytes(uri) == before  # the listing and every byte


def test_an_approval_that_times_out_changes_nothing(airflow: Airflow, tmp_path: Path) -> None:
    uri = two_epochs(tmp_path)
    before = store_bytes(uri)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3, approval_timeout_minutes=0.02)
    airflow.wait_for_approval(proc, log)
    time.sleep(2)  # past the 1.2 s deadline; then the scheduler's own sweep resolves it
    sweep = (
        "from airflow.jobs.job import Job\n"
        "from airflow.jobs.scheduler_job_runner import SchedulerJobRunner\n"
        "SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts()\n"
    )
    swept = subprocess.run(
        [str(Path(airflow.env["AIRFLOW_BIN"]).parent / "python"), "-c", sweep],
        env=airflow.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stderr[-3000:]
    logs = finish(proc, log)
    assert proc.returncode == 0, logs[-3000:]
    assert "rejected by nobody (timed out); nothing is restored" in logs
    assert store_bytes(uri) == before


def test_an_approval_after_the_job_moved_on_is_refused_and_writes_nothing(
    airflow: Airflow, tmp_path: Path
) -> None:
    uri = two_epochs(tmp_path)
    log = tmp_path / "restore.log"
    proc = airflow.start_restore(uri, log, source="latest", parallelism=3)
    run_id = airflow.wait_for_approval(proc, log)
    clock = new_clock()
    clock.advance(3 * STEP_MS)
    cycle(small_job(), uri, clock)  # an epoch completes checkpoint 3 while the plan waits
    after_epoch = store_bytes(uri)
    airflow.answer(run_id, "Approve")
    logs = finish(proc, log)
    assert proc.returncode != 0
    assert (
        "job clickstream changed since its restore plan was approved (latest completed checkpoint 2, "
        "generation 1 then, latest completed checkpoint 3, generation 1 now): nothing was restored; "
        "trigger epochal_restore again to review a new plan"
    ) in logs
    assert store_bytes(uri) == after_epoch  # not even the lease was taken
    assert generation(uri) == 1
