"""The Checkpoints view in a real browser against a real Airflow API server.

A few epochs run first (the in-process cycle, no Spark: three completed checkpoints, one aborted,
one in flight). Then the test starts ``airflow api-server`` on a free loopback port (temporary
AIRFLOW_HOME, SQLite, the simple auth manager with one user and a passwords file -- not its
"all admins" mode, which authenticates every request -- and ``plugins/`` as the plugins folder)
and checks:

* the plugin is registered (its FastAPI app and the "Checkpoints" navigation entry);
* the REST API refuses a request without a token (401) and a forged token, and answers with one;
* headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven by Selenium) is refused
  without a session, then gets the UI's session cookie (a token from ``POST /auth/token``), opens
  the Checkpoints page, sees the two SVG charts (overview tab) and the history rows (history tab),
  opens a checkpoint's detail,
  and opens the view inside the Airflow UI (the external view's iframe); screenshots are saved to
  ``$EPOCHAL_TEST_ARTIFACTS`` (default: a temporary folder printed by the test).

Without Chromium the browser part is skipped with the reason (``make browser-deps`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.airflow.support import api_server
from tests.unit.monitoring.support import JOB_ID, Made, make_history

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
USER, PASSWORD = "epochal-viewer", "test-only-password"


def http(url: str, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


@dataclass
class Server:
    base: str
    made: Made
    log: Path

    def token(self) -> str:
        request = urllib.request.Request(
            f"{self.base}/auth/token",
            data=json.dumps({"username": USER, "password": PASSWORD}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201
            return str(json.loads(response.read())["access_token"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    made = make_history(tmp_path_factory.mktemp("store"))
    home = tmp_path_factory.mktemp("airflow_home")
    (home / "dags").mkdir()
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "EPOCHAL_JOBS": "tests.unit.monitoring.support:small_job",
        "EPOCHAL_STORE_URI": made.uri,
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    with api_server(airflow, env, home, stop_grace_s=5) as base:
        yield Server(base, made, home / "api-server.log")


def test_plugin_is_registered_with_its_app_and_nav_entry(server: Server) -> None:
    status, body = http(f"{server.base}/api/v2/plugins", server.token())
    assert status == 200, body
    mine = [p for p in body["plugins"] if p["name"] == "epochal_checkpoints"]
    assert mine, f"plugin not loaded: {[p['name'] for p in body['plugins']]}; log: {server.log}"
    assert mine[0]["fastapi_apps"][0]["url_prefix"] == "/epochal"
    views = mine[0]["external_views"]
    assert views[0]["name"] == "Checkpoints" and views[0]["href"] == "/epochal/checkpoints"


def test_api_requires_airflow_authentication(server: Server) -> None:
    url = f"{server.base}/epochal/api/jobs/{JOB_ID}"
    status, body = http(url)
    assert status == 401 and body == {"detail": "Not authenticated"}
    assert http(f"{server.base}/epochal/checkpoints/{JOB_ID}")[0] == 401
    assert http(url, "forged.token.value")[0] in (401, 403)
    status, body = http(url, server.token())
    assert status == 200, body
    counts = body["overview"]["counts"]
    assert (counts["failed"], counts["in_progress"]) == (1, 1) and counts["completed"] >= 1
    status, jobs = http(f"{server.base}/epochal/api/jobs", server.token())
    assert jobs == {"jobs": [JOB_ID], "broken": {}}
    status, schema = http(f"{server.base}/epochal/openapi.json")
    assert status == 200 and "/api/jobs/{job_id}/checkpoints" in schema["paths"]


def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("EPOCHAL_TEST_ARTIFACTS")
    path = Path(where) / "ui" if where else tmp_path_factory.mktemp("ui-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(
            "headless Chromium is not installed (Debian packages chromium and chromium-driver): "
            "run `make browser-deps` (apt-get install -y chromium chromium-driver) as root"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"epochal-chromium-{os.getpid()}"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,1800",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_checkpoints_page_renders_history_and_charts_in_chromium(
    server: Server, browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    out = artifacts_dir(tmp_path_factory)
    browser.get(f"{server.base}/epochal/checkpoints/{JOB_ID}")
    assert "Not authenticated" in browser.page_source and not browser.find_elements(By.CSS_SELECTOR, "table")
    browser.add_cookie({"name": "_token", "value": server.token(), "path": "/"})  # the UI's session cookie
    browser.get(f"{server.base}/epochal/checkpoints/{JOB_ID}")
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "nav.tabs")))
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 2 and all(c.size["width"] > 100 and c.size["height"] > 100 for c in charts)
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart circle")) >= 2
    browser.save_screenshot(str(out / "checkpoints-overview-tab.png"))
    browser.find_element(By.CSS_SELECTOR, 'nav.tabs a[data-tab="history"]').click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "table.history")))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.checkpoint")
    stored = http(f"{server.base}/epochal/api/jobs/{JOB_ID}/checkpoints", server.token())[1]
    assert [int(r.get_attribute("data-id")) for r in rows] == [
        c["checkpoint_id"] for c in stored["checkpoints"]
    ]
    statuses = {r.get_attribute("data-status") for r in rows}
    assert {"completed", "failed", "in_progress"} <= statuses
    page_shot = out / "checkpoints-page.png"
    assert browser.save_screenshot(str(page_shot)) and page_shot.stat().st_size > 10_000
    newest_completed = max(c["checkpoint_id"] for c in stored["checkpoints"] if c["status"] == "completed")
    browser.find_element(By.CSS_SELECTOR, f'tr.checkpoint[data-id="{newest_completed}"] a').click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "h3.operator")))
    assert browser.find_elements(By.CSS_SELECTOR, "tr.subtask")
    browser.save_screenshot(str(out / "checkpoint-detail.png"))
    # the same page inside the Airflow UI, through the "Checkpoints" navigation entry (an iframe)
    browser.get(f"{server.base}/plugin/epochal-checkpoints")
    frame = WebDriverWait(browser, 90).until(ec.presence_of_element_located((By.TAG_NAME, "iframe")))
    browser.save_screenshot(str(out / "airflow-ui-checkpoints.png"))
    browser.switch_to.frame(frame)
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "h1")))
    assert "Checkpoints" in browser.find_element(By.CSS_SELECTOR, "h1").text
    assert browser.find_elements(By.CSS_SELECTOR, f'tr.job[data-job="{JOB_ID}"]')
    browser.switch_to.default_content()
    print(f"\nscreenshots of the Checkpoints view: {out}")
