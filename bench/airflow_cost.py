"""S5 through Airflow: wall time of ``airflow dags test epochal_<job>`` for an epoch whose input is
empty (the trigger task finds no new records and the run short-circuits), next to a run with a
small input. Real Airflow (SQLite in a temporary AIRFLOW_HOME), in-process executor, local store.
The Airflow numbers include starting the ``airflow`` CLI and parsing the DAG folder."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from spark_jobs.api.job import Job


def empty_job() -> Job:
    """The clickstream job shape on a generator whose first record lies far in the future."""
    from spark_jobs.sources.generator import DEFAULT_START_MS
    from tests.unit.runtime.support import small_job

    return small_job(start_ms=DEFAULT_START_MS + 10**12)


def run(epochs: int) -> dict[str, Any]:
    from tests.integration.airflow.support import airflow_environment, dags_test

    root = Path(tempfile.mkdtemp(prefix="epochal-bench-s5-airflow-"))
    env = airflow_environment(root / "home")
    samples: dict[str, list[float]] = {"empty": [], "small_input": []}
    for name, jobs in (
        ("empty", "bench.airflow_cost:empty_job"),
        ("small_input", "tests.unit.runtime.support:small_job"),
    ):
        store = (root / f"store-{name}").as_uri()
        for epoch in range(1, epochs + 1):
            began = time.perf_counter()
            result = dags_test(env, "epochal_clickstream", epoch, EPOCHAL_STORE_URI=store, EPOCHAL_JOBS=jobs)
            seconds = time.perf_counter() - began
            if result.returncode != 0:
                tail = (result.stderr or result.stdout)[-400:]
                raise RuntimeError(f"airflow dags test failed for {name} epoch {epoch}: {tail}")
            samples[name].append(seconds)
    return {"samples_s": samples}
