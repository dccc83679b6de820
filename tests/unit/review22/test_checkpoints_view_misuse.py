"""The Checkpoints view attacked as a careless user or a hostile site would: cross-site and odd trigger
posts (``Origin: null``, no Origin with a cookie, a forged Host, a body that is not a form or not
UTF-8), no token, Airflow down, a broken or vanished savepoint, names with ``/``/``..`` and HTML, an
abort reason with a script, a page past the end, a one-point trend, jobs with nothing or only
failures. In process (FastAPI's TestClient, the in-process epoch cycle; no Spark, no Airflow server)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api import security
from epochal_airflow.ui import trigger
from epochal_airflow.ui.app import JobDirectory, create_app
from fastapi.testclient import TestClient

from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime.cycle import coordinator_for, trigger_epoch
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core.failures import CheckpointFailureReason
from state_store.monitoring import CheckpointStats
from state_store.monitoring.health import job_health
from state_store.monitoring.html import jobs_page, sparkline
from state_store.monitoring.savepoints import SavepointInfo, list_savepoints
from state_store.storage import open_store
from tests.unit.monitoring.support import JOB_ID, Made, TickingClock, make_history, small_job

XSS = "<img src=x onerror=alert(1)>\"'&"
ODD = "nightly@2026+1"  # a valid object key, not a valid savepoint name
SP = f"/checkpoints/{JOB_ID}/trigger/restore?savepoint=keep"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """One completed checkpoint, savepoint ``keep``, a failure whose reason and run id are HTML, a
    savepoint folder whose name is no savepoint name and one whose manifest does not decode."""
    made = make_history(Path(tmp_path_factory.mktemp("r22")), epochs=1)
    job, clock = small_job(), TickingClock(DEFAULT_START_MS + 10**7)
    store = open_store(made.uri)
    coordinator = coordinator_for(job, store, clock)
    coordinator.abort(made.in_progress, CheckpointFailureReason.MANUALLY_ABORTED, "the run died")
    take_savepoint(job, made.uri, clock, "keep")
    hostile = trigger_epoch(job, store, clock, request_id=XSS)
    assert hostile is not None
    coordinator.abort(hostile.checkpoint_id, CheckpointFailureReason.MANUALLY_ABORTED, XSS)
    store.put(f"{JOB_ID}/savepoints/{ODD}/_metadata.json", b"junk")  # the store's keys allow it
    store.put(f"{JOB_ID}/savepoints/broken/_metadata.json", b"junk")
    return made


class Airflow:
    """Stands in for Airflow's REST API: records each POST and answers ``status`` (or raises)."""

    def __init__(self, status: int = 200, body: Any = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict[str, str], Any]] = []
        self.status, self.body, self.error = status, body, error

    async def post(self, url: str, *, json: Any, headers: dict[str, str]) -> httpx.Response:
        self.calls.append((url, headers, json))
        if self.error is not None:
            raise self.error
        body = self.body if self.body is not None else {"dag_run_id": "manual__1", "state": "queued"}
        return httpx.Response(self.status, json=body)


@pytest.fixture
def airflow(monkeypatch: pytest.MonkeyPatch) -> Airflow:
    fake = Airflow()
    monkeypatch.setattr(httpx.AsyncClient, "post", fake.post)
    return fake


@pytest.fixture(scope="module")
def client(made: Made) -> TestClient:
    app = create_app(lambda: open_store(made.uri), JobDirectory(extra_ids=(JOB_ID,)), max_age_ms=0)
    app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(
        username="admin", role="admin"
    )
    return TestClient(app, base_url="http://airflow.local:8080")


def post(client: TestClient, url: str = SP, *, headers: dict[str, str] | None = None, **kw: Any) -> Any:
    kw.setdefault("data", {"dry_run": "on"})
    sent = {"Origin": "http://airflow.local:8080", "Authorization": "Bearer T", **(headers or {})}
    return client.post(url, headers={k: v for k, v in sent.items() if v is not None}, **kw)


def test_a_same_site_trigger_reaches_airflow_with_the_users_token(
    client: TestClient, airflow: Airflow
) -> None:
    response = post(client)
    assert response.status_code == 200 and 'data-run="manual__1"' in response.text
    url, headers, conf = airflow.calls[0]
    assert url.endswith("/api/v2/dags/epochal_restore/dagRuns") and headers["Authorization"] == "Bearer T"
    assert conf["conf"]["dry_run"] is True and conf["conf"]["source"].endswith("/savepoints/keep")


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "null"},  # a sandboxed iframe or data: page on another site
        {"Origin": None, "Sec-Fetch-Site": "cross-site"},
        {"Origin": None, "Authorization": None, "Cookie": "_token=T"},  # a cookie and no proof of origin
        {"Origin": "http://airflow.local:8080.evil.example"},
    ],
)
def test_a_cross_site_trigger_is_refused(
    client: TestClient, airflow: Airflow, headers: dict[str, str | None]
) -> None:
    response = post(client, headers=headers)  # type: ignore[arg-type]
    assert response.status_code == 403, response.text
    assert "another site" in response.json()["detail"] and airflow.calls == []


def test_a_forged_host_header_never_receives_the_users_token(client: TestClient, airflow: Airflow) -> None:
    post(client, headers={"Host": "evil.example", "Origin": "http://evil.example"})
    assert all("evil.example" not in url for url, _, _ in airflow.calls)


@pytest.mark.parametrize(
    ("kwargs", "code", "fragment"),
    [
        (
            {"content": b"dry_run=\xff", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
            400,
            "UTF-8",
        ),
        ({"json": {"dry_run": True}, "data": None}, 415, "form"),
    ],
)
def test_a_body_that_is_not_a_form_is_one_line_not_a_500_nor_a_real_restore(
    client: TestClient, airflow: Airflow, kwargs: dict[str, Any], code: int, fragment: str
) -> None:
    headers = kwargs.pop("headers", {})
    if kwargs.get("data", 1) is None:
        kwargs.pop("data")
        kwargs["data"] = None
    response = post(client, headers=headers, **kwargs)
    assert response.status_code == code, response.text
    detail = response.json()["detail"]
    assert fragment in detail and "\n" not in detail and airflow.calls == []


def test_a_request_without_a_token_is_not_forwarded_with_an_empty_one(
    client: TestClient, airflow: Airflow
) -> None:
    response = post(client, headers={"Authorization": None})
    assert response.status_code == 401 and "log in to Airflow again" in response.json()["detail"]
    assert airflow.calls == []


def test_airflow_down_is_one_line_naming_its_api_not_a_500(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = Airflow(error=httpx.ConnectError("connection refused"))
    monkeypatch.setattr(httpx.AsyncClient, "post", fake.post)
    response = post(client)
    assert (
        response.status_code == 502
        and "Airflow's REST API" in response.text
        and "connection refused" in response.text
    )


def test_airflow_refusing_the_run_shows_its_reason_escaped(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = Airflow(status=409, body={"detail": f"already running {XSS}"})
    monkeypatch.setattr(httpx.AsyncClient, "post", fake.post)
    response = post(client)
    assert response.status_code == 409 and "HTTP 409" in response.text and "<img" not in response.text


@pytest.mark.parametrize("name", ["../keep", "a/b", "..", "keep%2F..%2F..", XSS])
def test_a_savepoint_name_with_slashes_dots_or_html_is_one_line(client: TestClient, name: str) -> None:
    response = client.get(f"/checkpoints/{JOB_ID}/trigger/restore", params={"savepoint": name})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "savepoint" in detail and "Savepoints tab" in detail


def test_a_savepoint_that_does_not_decode_cannot_be_restored_from(
    client: TestClient, airflow: Airflow
) -> None:
    assert client.get(f"/checkpoints/{JOB_ID}/trigger/restore?savepoint=broken").status_code == 409
    response = post(client, f"/checkpoints/{JOB_ID}/trigger/restore?savepoint=broken")
    assert response.status_code == 409 and "does not decode" in response.json()["detail"]
    assert airflow.calls == []


def test_a_savepoint_deleted_after_listing_is_not_listed_as_broken(made: Made) -> None:
    store = open_store(made.uri)
    take_savepoint(small_job(), made.uri, TickingClock(DEFAULT_START_MS + 10**8), "gone")

    class Vanishing:
        def __init__(self) -> None:
            self.uri = store.uri

        def list(self, prefix: str) -> Any:
            found = list(store.list(prefix))
            for info in found:
                if "/gone/" in info.key:
                    store.delete(info.key)  # deleted between the listing and the read
            return found

        def get(self, key: str) -> Any:
            return store.get(key)

    names = [s.name for s in list_savepoints(Vanishing(), JOB_ID)]  # type: ignore[arg-type]
    assert "gone" not in names and "keep" in names


def test_every_page_escapes_html_from_storage(client: TestClient) -> None:
    pages = [
        "/checkpoints",
        *(
            f"/checkpoints/{JOB_ID}?tab={t}"
            for t in ("overview", "history", "summary", "configuration", "savepoints")
        ),
    ]
    history = client.get(f"/checkpoints/{JOB_ID}?tab=history").text
    pages += [f"/checkpoints/{JOB_ID}/{n}" for n in re.findall(r'data-id="(\d+)"', history)]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert "<img" not in response.text and "onerror=alert(1)>" not in response.text, path
    assert "&lt;img src=x onerror=alert(1)&gt;" in history  # shown, escaped
    savepoints = client.get(f"/checkpoints/{JOB_ID}?tab=savepoints").text
    assert 'data-action="restore"' in savepoints  # the good savepoint keeps its buttons
    assert f'data-name="{ODD}"' in savepoints and "not a valid savepoint name" in savepoints


def test_the_epochs_field_takes_ascii_digits_only_with_one_line() -> None:
    sp = SavepointInfo("sp", "file:///s/job/savepoints/sp", 3, 1, "parquet")
    with pytest.raises(ValueError, match=r"^epochs '²' is invalid: use a whole number from 1 to 100000$"):
        trigger.conf_of("backfill", "job", sp, {"new_job_id": "bf", "epochs": "²"})


def test_a_page_past_the_end_says_so_and_links_back(client: TestClient) -> None:
    text = client.get(f"/checkpoints/{JOB_ID}?tab=history&offset=1000&limit=10").text
    pager = re.search(r'<p class="pager">(.*?)</p>', text, re.S)
    assert pager and "no checkpoints on this page" in pager.group(1) and "newer" in pager.group(1)


def test_a_one_point_trend_draws_a_visible_point() -> None:
    assert "<circle" in sparkline([(3, 1024.0)])


def test_jobs_with_no_checkpoints_or_only_failures_render_their_health(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    job, clock = small_job(), TickingClock(DEFAULT_START_MS)
    store = open_store(uri)
    for _ in range(2):
        clock.advance(10_000)
        failed = trigger_epoch(job, store, clock, request_id="r")
        assert failed is not None
        coordinator_for(job, store, clock).abort(
            failed.checkpoint_id, CheckpointFailureReason.MANUALLY_ABORTED, "x"
        )
    stats = CheckpointStats(store, max_age_ms=0)
    failing = job_health(stats.stats(JOB_ID), clock.now)
    empty = job_health(stats.stats("never-ran"), clock.now)
    assert (failing.health, failing.failures_24h, failing.latest_completed, failing.trend) == (
        "failing",
        2,
        None,
        (),
    )
    assert (empty.health, empty.failures_24h) == ("no checkpoints", 0)
    text = jobs_page([failing, empty], {}, now_ms=clock.now)
    assert 'data-health="failing"' in text and 'data-health="no checkpoints"' in text
    app = create_app(lambda: store, JobDirectory(extra_ids=(JOB_ID, "never-ran")), max_age_ms=0)
    app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(username="a", role="admin")
    web = TestClient(app)
    for path in (
        "/checkpoints",
        *(
            f"/checkpoints/{j}?tab={t}"
            for j in (JOB_ID, "never-ran")
            for t in ("overview", "history", "summary", "savepoints")
        ),
    ):
        assert web.get(path).status_code == 200, path
