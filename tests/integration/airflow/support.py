"""Helpers for tests that drive real Airflow (``airflow dags test`` in a temporary AIRFLOW_HOME with
SQLite): ``airflow db migrate`` runs once per test process and every later home gets a copy of
that migrated database (a migration costs tens of seconds on a loaded machine)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

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
