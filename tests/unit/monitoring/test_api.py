"""The Checkpoints app in process: Airflow's own authentication dependency refuses a request without a
token; with a user, the JSON numbers equal the manifests and the HTML shows the rows and the charts;
bad input is a one-line 400/404."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api import security
from epochal_airflow.ui.app import JobDirectory, create_app
from fastapi import FastAPI
from fastapi.testclient import TestClient

from state_store.core import JobLayout, load_completed
from state_store.storage import open_store
from tests.unit.monitoring.support import JOB_ID, Made


def make_app(uri: str, *, user: bool = True) -> FastAPI:
    app = create_app(lambda: open_store(uri), JobDirectory(extra_ids=(JOB_ID,)), max_age_ms=0)
    if user:
        app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(
            username="admin", role="admin"
        )
    return app


@pytest.fixture(scope="module")
def client(history: Made) -> TestClient:
    return TestClient(make_app(history.uri))


def test_a_request_without_a_token_is_refused(history: Made) -> None:
    anonymous = TestClient(make_app(history.uri, user=False))
    for path in ("/api/jobs", f"/api/jobs/{JOB_ID}", f"/checkpoints/{JOB_ID}"):
        response = anonymous.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"detail": "Not authenticated"}


def test_json_numbers_match_the_manifests(client: TestClient, history: Made) -> None:
    store, layout = open_store(history.uri), JobLayout(JOB_ID)
    assert client.get("/api/jobs").json() == {"jobs": [JOB_ID], "broken": {}}
    body = client.get(f"/api/jobs/{JOB_ID}").json()
    counts = body["overview"]["counts"]
    assert counts["failed"] == 1 and counts["in_progress"] == 1
    assert body["dag_id"] == "epochal_monitored"
    page = client.get(f"/api/jobs/{JOB_ID}/checkpoints", params={"limit": 500}).json()
    assert page["total"] == counts["triggered"] == len(page["checkpoints"])
    completed = [c for c in page["checkpoints"] if c["status"] == "completed"]
    assert len(completed) == counts["completed"] >= 1
    for c in completed:
        meta = load_completed(store, layout, c["checkpoint_id"]).metadata
        assert c["state_size"] == meta.state_size
        assert c["duration_ms"] == meta.wall_completed_ms - meta.wall_trigger_ms  # wall-clock: true
        assert c["acked"] == len(meta.tasks)
    sizes = sorted(c["state_size"] for c in completed)
    assert body["summary"]["state_size"]["max"] == sizes[-1]
    assert body["summary"]["state_size"]["min"] == sizes[0]
    detail = client.get(f"/api/jobs/{JOB_ID}/checkpoints/{history.completed[-1]}").json()
    meta = load_completed(store, layout, history.completed[-1]).metadata
    assert sum(op["state_size"] for op in detail["operators"]) == meta.state_size
    assert sum(op["acked"] for op in detail["operators"]) == len(meta.tasks)
    config = client.get(f"/api/jobs/{JOB_ID}/configuration").json()
    assert config["storage"]["latest_pointer"] == history.completed[-1]


def test_html_page_has_history_rows_charts_and_run_links(client: TestClient, history: Made) -> None:
    response = client.get(f"/checkpoints/{JOB_ID}?tab=history")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    text = response.text
    assert text.count('<tr class="checkpoint"') >= 3
    overview = client.get(f"/checkpoints/{JOB_ID}").text
    assert overview.count('<svg class="chart"') == 2 and "<polyline" in overview
    assert "/dags/epochal_monitored/runs/run-2" in text
    assert "MANUALLY_ABORTED: by the test" in text
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    detail = client.get(f"/checkpoints/{JOB_ID}/{history.completed[-1]}")
    assert detail.status_code == 200 and 'class="operator"' in detail.text
    assert client.get("/checkpoints").text.count(f'href="/checkpoints/{JOB_ID}"') == 1


@pytest.mark.parametrize(
    ("path", "code", "fragment"),
    [
        (f"/api/jobs/{JOB_ID}/checkpoints/999", 404, "checkpoint 999 of job monitored is not in storage"),
        ("/api/jobs/bad..id", 400, "job id 'bad..id' is invalid"),
        (f"/api/jobs/{JOB_ID}/checkpoints?limit=0", 422, "limit"),
        (f"/api/jobs/{JOB_ID}/checkpoints?status=bogus", 422, "status"),
    ],
)
def test_bad_input_is_refused_with_a_reason(client: TestClient, path: str, code: int, fragment: str) -> None:
    response = client.get(path)
    assert response.status_code == code
    assert fragment in str(response.json()["detail"])


def test_the_api_conforms_to_its_openapi_schema(history: Made) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis.specs.openapi.checks import ignored_auth

    schema = schemathesis.openapi.from_asgi("/openapi.json", make_app(history.uri))
    operations = list(schema.get_all_operations())
    assert len(operations) == 6
    failures: list[str] = []
    for result in operations:
        operation = result.ok()

        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy(), real_job=st.booleans())
        def check(case: Any, real_job: bool) -> None:
            if real_job and "job_id" in (case.path_parameters or {}):
                case.path_parameters["job_id"] = JOB_ID  # a real job, so responses carry data
            # auth is overridden in process (proven above and against a real api-server): skip that check
            case.call_and_validate(excluded_checks=[ignored_auth])

        try:
            check()
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n".join(failures)


def test_the_row_schemas_are_the_rows_json() -> None:
    """The REST schema of a checkpoint, a summary and a subtask is built from the monitoring
    dataclasses: its properties are exactly the keys ``to_json`` writes, bounds and docs included."""
    from epochal_airflow.ui import schemas

    from state_store.monitoring.model import CheckpointRow, SubtaskDetail, SummaryStats

    row = CheckpointRow(7, "failed", 1_000, 900, 1, 2, 0, 0, None, False, 3, "", "not_run", reason="x")
    pairs = [
        (schemas.Checkpoint, row.to_json()),
        (schemas.Summary, SummaryStats(0, None, None, None, None, None).to_json()),
        (schemas.Subtask, SubtaskDetail(0, "pending", 1, 0, 0, 0).to_json()),
    ]
    for model, written in pairs:
        assert set(model.model_json_schema()["properties"]) == set(written)
        model.model_validate(written)  # what to_json writes is valid under its schema
    assert row.to_json()["duration_ms"] is None  # ended before it started: never negative
    props = schemas.Checkpoint.model_json_schema()["properties"]
    assert props["checkpoint_id"]["minimum"] == 1 and "failed" in props["status"]["description"]
