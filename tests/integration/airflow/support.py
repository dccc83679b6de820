"""Helpers for tests that drive real Airflow (``airflow dags test`` in a temporary AIRFLOW_HOME with
SQLite): ``airflow db migrate`` runs once per test process and every later home gets a copy of
that migrated database (a migration costs tens of seconds on a loaded machine)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spark_jobs.sources.generator import DEFAULT_START_MS
from tests.unit.runtime.support import STEP_MS

ROOT = Path(__file__).resolve().parents[3]
AIRFLOW_BIN = str(Path(sys.executable).parent / "airflow")
_template: Path | None = None


def logical_date(epoch: int) -> str:
    return datetime.fromtimestamp((DEFAULT_START_MS + epoch * STEP_MS) / 1000, tz=UTC).isoformat()


def airflow_environment(home: Path, **extra: str) -> dict[str, str]:
    """An environment for ``airflow`` commands on a migrated SQLite DB in ``home``."""
    global _template
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "EPOCHAL_JOBS": "tests.unit.runtime.support:small_job",
        "EPOCHAL_EXECUTOR": "local",
        "EPOCHAL_RESTART": "none",
        "AIRFLOW_BIN": AIRFLOW_BIN,
        **extra,
    }
    env.pop("EPOCHAL_FAULT", None)
    home.mkdir(parents=True, exist_ok=True)
    if _template is None:  # a pristine migrated DB, never used by a test itself
        template_home = Path(tempfile.mkdtemp(prefix="epochal-airflow-template-"))
        subprocess.run(
            [AIRFLOW_BIN, "db", "migrate"],
            env={**env, "AIRFLOW_HOME": str(template_home)},
            check=True,
            capture_output=True,
            timeout=600,
        )
        _template = template_home / "airflow.db"
    shutil.copyfile(_template, home / "airflow.db")
    return env


def dags_test(
    env: dict[str, str], dag_id: str, epoch: int, *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRFLOW_BIN, "dags", "test", dag_id, logical_date(epoch), *args],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=600,
    )


def is_paused(env: dict[str, str], dag_id: str) -> bool | None:
    """The ``is_paused`` flag of ``dag_id`` in the metadata DB (None when the DAG is not there)."""
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as db:
        row = db.execute("SELECT is_paused FROM dag WHERE dag_id = ?", (dag_id,)).fetchone()
    return None if row is None else bool(row[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_server(
    airflow_bin: str, env: dict[str, str], home: Path, *, stop_grace_s: float = 10
) -> Iterator[str]:
    """``airflow api-server`` on a free loopback port in its own session (log: ``home/api-server.log``);
    yields its base URL once ``/api/v2/monitor/health`` answers 200 (the test fails with the log's tail
    if it dies or takes over 180 s); stops the whole process group (SIGTERM, then SIGKILL)."""
    port = free_port()
    log = home / "api-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [airflow_bin, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"airflow api-server did not start: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=stop_grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
