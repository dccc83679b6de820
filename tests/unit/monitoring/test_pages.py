"""The Checkpoints pages as an Airflow user reads them: the jobs overview (health, latest completed and
its age, failures in the last day, trend, broken jobs), Flink's tabs, readable configuration, subtask
metrics as columns, restores and savepoints marked with their lineage, and the savepoints list whose
"restore from this" / "backfill from this" open a prefilled trigger form."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api import security
from epochal_airflow.ui import trigger
from epochal_airflow.ui.app import JobDirectory, create_app
from fastapi.testclient import TestClient

from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from state_store.monitoring.fmt import fmt_duration, fmt_value
from state_store.monitoring.savepoints import SavepointInfo
from tests.unit.monitoring.support import JOB_ID, Made, TickingClock, make_history, small_job


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> tuple[Made, int]:
    """History, then savepoint ``before-change`` and a restore from it (a new generation)."""
    made = make_history(Path(tmp_path_factory.mktemp("lineage")), epochs=2)
    job, clock = small_job(), TickingClock(10**12 + 7)
    from spark_jobs.runtime.cycle import coordinator_for
    from state_store.core.failures import CheckpointFailureReason
    from state_store.storage import open_store

    coordinator_for(job, open_store(made.uri), clock).abort(
        made.in_progress, CheckpointFailureReason.MANUALLY_ABORTED, "the run died"
    )
    take_savepoint(job, made.uri, clock, "before-change")
    report = restore(
        job, made.uri, clock, RestoreRequest(source=f"{made.uri}/{JOB_ID}/savepoints/before-change")
    )
    return made, report.checkpoint_id


@pytest.fixture(scope="module")
def client(lineage: tuple[Made, int]) -> TestClient:
    from state_store.storage import open_store

    made, _ = lineage
    app = create_app(
        lambda: open_store(made.uri),
        JobDirectory(refs=("no_such_module:job",), extra_ids=(JOB_ID,)),
        max_age_ms=0,
    )
    app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(
        username="admin", role="admin"
    )
    return TestClient(app)


def test_the_landing_page_lists_each_job_with_health_latest_age_failures_trend_and_broken_jobs(
    client: TestClient, lineage: tuple[Made, int]
) -> None:
    text = client.get("/checkpoints").text
    row = re.search(rf'<tr class="job" data-job="{JOB_ID}" data-health="(\w+)">(.*?)</tr>', text, re.S)
    assert row is not None, text
    assert row.group(1) == "healthy"  # the newest decided checkpoint is the restore's, completed
    assert f"/checkpoints/{JOB_ID}/{lineage[1]}" in row.group(2) and " ago" in row.group(2)
    assert '<svg class="trend"' in row.group(2)
    broken = re.search(r'<tr class="broken"><td>no_such_module:job</td><td class="error">(.*?)</td>', text)
    assert broken is not None and "no_such_module" in broken.group(1)


def test_the_job_page_has_flinks_tabs_and_only_the_chosen_one_is_rendered(client: TestClient) -> None:
    overview = client.get(f"/checkpoints/{JOB_ID}").text
    assert re.findall(r'data-tab="(\w+)"', overview) == [
        "overview",
        "history",
        "summary",
        "configuration",
        "savepoints",
    ]
    assert 'class="active" data-tab="overview"' in overview and '<table class="history"' not in overview
    history = client.get(f"/checkpoints/{JOB_ID}?tab=history").text
    assert '<table class="history"' in history and 'class="active" data-tab="history"' in history
    assert client.get(f"/checkpoints/{JOB_ID}?tab=bogus").status_code == 422


def test_restores_and_savepoints_are_marked_with_their_lineage(
    client: TestClient, lineage: tuple[Made, int]
) -> None:
    history = client.get(f"/checkpoints/{JOB_ID}?tab=history").text
    kinds = dict(re.findall(r'data-id="(\d+)" data-status="\w+" data-kind="(\w+)"', history))
    assert kinds[str(lineage[1])] == "restore"
    assert "savepoint" in kinds.values() and "checkpoint" in kinds.values()
    restore_row = re.search(rf'data-id="{lineage[1]}".*?</tr>', history, re.S)
    assert restore_row is not None and "restored from savepoint" in restore_row.group(0)
    assert "before-change" in restore_row.group(0)
    savepoint_id = next(i for i, k in kinds.items() if k == "savepoint")
    sp_row = re.search(rf'data-id="{savepoint_id}".*?</tr>', history, re.S)
    assert sp_row is not None and "savepoint before-change" in sp_row.group(0)


def test_configuration_is_readable_values_not_raw_dicts_or_epoch_milliseconds(client: TestClient) -> None:
    text = client.get(f"/checkpoints/{JOB_ID}?tab=configuration").text
    table = text.split('<table class="configuration kv">', 1)[1]
    assert "{" not in table and "'" not in table.replace("&#x27;", "")
    assert not re.search(r">\d{12,}<", table)  # no epoch milliseconds
    assert re.search(r'data-key="created_ms"><th>created ms</th><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d<', table)
    assert re.search(r'data-key="timeout_ms"><th>timeout ms</th><td>[\d.]+ (ms|s|min \d+ s)<', table)


def test_subtask_metrics_are_table_columns(client: TestClient, lineage: tuple[Made, int]) -> None:
    made, _ = lineage
    text = client.get(f"/checkpoints/{JOB_ID}/{made.completed[-1]}").text
    tables = re.findall(r'<table class="subtasks"><thead><tr>(.*?)</tr></thead>(.*?)</table>', text, re.S)
    assert tables
    heads = [re.findall(r"<th>(.*?)</th>", head) for head, _ in tables]
    assert any("alignment ms" in h for h in heads), heads
    for head, body in tables:
        for row in re.findall(r'<tr class="subtask">(.*?)</tr>', body, re.S):
            assert row.count("<td") == head.count("<th>")
            assert "=" not in re.sub(r"<[^>]+>", "", row)  # no `k=v, ...` strings


def test_the_savepoints_tab_lists_each_with_restore_and_backfill_links(
    client: TestClient, lineage: tuple[Made, int]
) -> None:
    text = client.get(f"/checkpoints/{JOB_ID}?tab=savepoints").text
    assert '<tr class="savepoint" data-name="before-change">' in text
    restore_link = re.search(r'href="([^"]+)" class="button" data-action="restore"', text)
    backfill_link = re.search(r'href="([^"]+)" class="button" data-action="backfill"', text)
    assert restore_link and backfill_link
    form = client.get(restore_link.group(1).replace("&amp;", "&")).text
    assert (
        'data-dag="epochal_restore"' in form and f"{lineage[0].uri}/{JOB_ID}/savepoints/before-change" in form
    )
    assert client.get(f"/checkpoints/{JOB_ID}/trigger/restore?savepoint=nope").status_code == 404
    api = client.get(f"/api/jobs/{JOB_ID}/savepoints").json()
    assert [s["name"] for s in api["savepoints"]] == ["before-change"]


def test_a_trigger_post_from_another_site_is_refused(client: TestClient) -> None:
    response = client.post(
        f"/checkpoints/{JOB_ID}/trigger/restore?savepoint=before-change",
        data={"dry_run": "on"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403 and "another site" in response.json()["detail"]


def test_the_trigger_conf_is_the_dags_params_and_bad_fields_are_one_line() -> None:
    sp = SavepointInfo("sp", "file:///s/job/savepoints/sp", 3, 1, "parquet")
    assert trigger.conf_of("restore", "job", sp, {"dry_run": "on"}) == {
        "job": "job",
        "source": "file:///s/job/savepoints/sp",
        "dry_run": True,
        "allow_non_restored_state": False,
    }
    assert trigger.conf_of("backfill", "job", sp, {"new_job_id": "bf", "epochs": "4"})["epochs"] == 4
    with pytest.raises(ValueError, match=r"epochs '0' is invalid: use a whole number"):
        trigger.conf_of("backfill", "job", sp, {"new_job_id": "bf", "epochs": "0"})
    with pytest.raises(ValueError, match=r"new job id '\.\./x' is invalid"):
        trigger.conf_of("backfill", "job", sp, {"new_job_id": "../x", "epochs": "1"})


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("timeout_ms", 600_000, "10 min 00 s"),
        ("created_ms", 1_700_000_000_000, "2023-11-14 22:13:20"),
        ("state_size", 3 * 1024 * 1024, "3.0 MiB"),
        ("mode_properties", {"forced": False, "retention": "x"}, "forced: no; retention: x"),
        ("operators", ["a", "b"], "a, b"),
        ("records_in", 1234567, "1,234,567"),
    ],
)
def test_values_are_humanized_by_their_key(key: str, value: object, shown: str) -> None:
    assert fmt_value(key, value) == shown


def test_durations_read_like_flinks() -> None:
    assert [fmt_duration(v) for v in (850, 12_345, 245_000, 7_380_000, 270_000_000)] == [
        "850 ms",
        "12.3 s",
        "4 min 05 s",
        "2 h 03 min",
        "3 d 03 h",
    ]
