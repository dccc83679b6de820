"""The newcomer pass, scripted: what README promises a new user, from a fresh clone.

1. ``git clone`` of this repository's HEAD into a temporary folder (``EPOCHAL_NEWCOMER_OVERLAY``: a
   space-separated list of paths copied from the working tree over the clone, to try uncommitted
   work before it is committed);
2. ``make demo`` there, on the already installed venv (``make VENV=<this venv>``; the clone's
   ``pyproject.toml``/``constraints.txt`` get an mtime older than the venv's install stamp so make does
   not reinstall -- a dry run proves it first) with ``DEMO_ARGS=--executor=local`` (the same DAG runs
   without a Spark JVM per task, to stay within the time budget);
3. ``make ui PORT=<free port>`` in the background until it prints the URL and the login;
4. Chromium logs in with that login (a token from ``POST /auth/token`` as the UI's session cookie) and
   takes screenshots of the DAG list, the Checkpoints overview, the job's page and a checkpoint's
   detail (kept under ``$EPOCHAL_TEST_ARTIFACTS/newcomer``), asserting they show the demo's job and
   checkpoints;
5. SIGINT to ``make ui``'s process group (Ctrl-C): it exits, nothing listens on the port, and no
   process it started (every descendant seen while it ran, and every process of their sessions)
   is alive.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.airflow.support import free_port
from tests.integration.ui.test_checkpoints_page import artifacts_dir
from tests.integration.ui.test_checkpoints_page import browser as browser  # the fixture, re-exported

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
JOB = "clickstream"


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> set[int]:
    """Live descendants of ``root`` (Linux /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not Path("/proc/self/stat").exists():
        pytest.skip("the process checks read /proc (Linux)")
    where = tmp_path_factory.mktemp("newcomer") / "epochal"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where)], check=True, timeout=120)
    for rel in os.environ.get("EPOCHAL_NEWCOMER_OVERLAY", "").split():
        target = where / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    stamp = VENV / ".installed"
    assert stamp.exists(), f"{VENV} has no install stamp: run `make install` in {ROOT} first"
    old = stamp.stat().st_mtime - 3600
    for name in ("pyproject.toml", "constraints.txt"):
        os.utime(where / name, (old, old))
    return where


def make(clone: Path, *args: str) -> list[str]:
    return ["make", "--no-print-directory", "-C", str(clone), f"VENV={VENV}", *args]


@pytest.fixture(scope="module")
def demo(clone: Path) -> Path:
    dry = subprocess.run(make(clone, "-n", "demo"), capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and "pip install" not in dry.stdout, (
        f"make demo would reinstall into the shared venv {VENV}:\n{dry.stdout}"
    )
    started = time.monotonic()
    result = subprocess.run(
        make(clone, "demo", "DEMO_ARGS=--executor=local"), capture_output=True, text=True, timeout=420
    )
    print(f"\nmake demo took {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (clone / ".demo" / "store" / JOB).is_dir(), result.stdout[-2000:]
    return clone


class Ui:
    def __init__(self, clone: Path, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.base = f"http://127.0.0.1:{port}"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                make(clone, "ui", f"PORT={port}"),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, like a terminal's foreground job
            )
        self.seen: set[int] = set()
        self.user, self.password = self._wait_for_login()

    def _wait_for_login(self) -> tuple[str, str]:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            found = re.search(r"login:\s+(\S+) / (\S+)", text)
            if "Airflow is up: " + self.base in text and found:
                self.seen |= descendants(self.proc.pid)
                return found.group(1), found.group(2)
            if self.proc.poll() is not None:
                pytest.fail(f"make ui exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.5)
        pytest.fail(f"make ui printed no URL and login in 300 s:\n{self.log.read_text()[-3000:]}")

    def token(self) -> str:
        request = urllib.request.Request(
            f"{self.base}/auth/token",
            data=json.dumps({"username": self.user, "password": self.password}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201
            return str(json.loads(response.read())["access_token"])

    def sessions(self) -> set[int]:
        return {int(f[3]) for pid in self.seen if (f := _stat(pid)) is not None and int(f[3]) != os.getsid(0)}


@pytest.fixture(scope="module")
def ui(demo: Path) -> Iterator[Ui]:
    running = Ui(demo, free_port(), demo / "make-ui.log")
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            os.killpg(running.proc.pid, signal.SIGKILL)
            running.proc.wait(timeout=30)


def test_newcomer_clone_demo_ui_screenshots_and_a_clean_stop(
    ui: Ui, browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    out = artifacts_dir(tmp_path_factory).parent / "newcomer"
    out.mkdir(parents=True, exist_ok=True)
    browser.get(f"{ui.base}/epochal/checkpoints")
    browser.add_cookie({"name": "_token", "value": ui.token(), "path": "/"})

    browser.get(f"{ui.base}/dags")
    WebDriverWait(browser, 120).until(lambda d: f"epochal_{JOB}" in d.page_source)
    assert browser.save_screenshot(str(out / "1-dag-list.png"))

    browser.get(f"{ui.base}/epochal/checkpoints")
    row = WebDriverWait(browser, 60).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f'tr.job[data-job="{JOB}"]'))
    )
    assert "healthy" in row.text or "failing" in row.text, row.text
    assert browser.save_screenshot(str(out / "2-checkpoints-overview.png"))

    row.find_element(By.CSS_SELECTOR, "a.job").click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "nav.tabs")))
    browser.find_element(By.CSS_SELECTOR, 'nav.tabs a[data-tab="history"]').click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "table.history")))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.checkpoint")
    statuses = [r.get_attribute("data-status") for r in rows]
    assert statuses.count("completed") >= 3 and "failed" in statuses, statuses
    assert browser.save_screenshot(str(out / "3-job-history.png"))

    newest = next(r for r in rows if r.get_attribute("data-status") == "completed")
    newest.find_element(By.CSS_SELECTOR, "a").click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.CSS_SELECTOR, "table.subtasks")))
    assert browser.find_elements(By.CSS_SELECTOR, "tr.subtask")
    assert browser.save_screenshot(str(out / "4-checkpoint-detail.png"))
    print(f"\nnewcomer screenshots: {out}")

    ui.seen |= descendants(ui.proc.pid)
    sessions = ui.sessions()
    assert len(ui.seen) >= 5 and sessions, (ui.seen, sessions)
    os.killpg(ui.proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
    ui.proc.wait(timeout=90)
    assert "stopped; nothing is left running" in ui.log.read_text(), ui.log.read_text()[-2000:]
    assert not listening(ui.port)
    assert [pid for pid in ui.seen if alive(pid)] == []
    left = [
        int(e.name)
        for e in Path("/proc").glob("[0-9]*")
        if (f := _stat(int(e.name))) is not None and f[0] != "Z" and int(f[3]) in sessions
    ]
    assert left == []
