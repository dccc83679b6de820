"""``make demo``: the example pipeline end to end on the embedded default -- local store, Spark
``local[*]``, real Airflow with SQLite (``airflow dags test``) -- on real time, with one injected
failure that Airflow records.

1. a fresh AIRFLOW_HOME under ``.demo/`` and ``airflow db migrate``;
2. DAG runs of ``epochal_clickstream``, each with the moment it starts as its logical date (real
   time: an epoch is the input since the previous run, about 20 s), so the checkpoints' dates are
   today's, their durations (wall-clock, recorded beside the logical time) and Airflow's run
   durations are true; the clicks begin ``LEAD_MS`` before the first run, so its windows close
   (:func:`demo_job`: the clickstream example, its start shared by every process through
   ``EPOCHAL_DEMO_START_MS``);
3. the run of epoch ``--fail-epoch`` raises inside ``run_epoch`` after its acks
   (``EPOCHAL_FAULT=after_ack``, mode ``raise``): the task fails and Airflow records the failed DAG
   run, whose id the aborted checkpoint keeps (the Checkpoints view links to it); the next run aborts
   that checkpoint and recovers, re-reading its input;
4. ``epochal_savepoint`` takes savepoint ``demo``; ``epochal_restore`` restores the job from it
   (its whole plan is printed) and one more epoch runs from the restored state -- every epoch's
   ``validate`` task checks the checkpoint with Great Expectations;
5. the checkpoint history and the latest committed window counts are printed, then how to look at
   it all in Airflow's UI (``make ui``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LEAD_MS = 15_000
"""The clicks begin this long before the first DAG run (its epoch then closes a 10 s window)."""
START_ENV = "EPOCHAL_DEMO_START_MS"
JOB_REF = "deploy.demo:demo_job"
UI_URL = "http://127.0.0.1:8080/"


def demo_job(**options: Any) -> Any:
    """The clickstream example whose clicks start at ``$EPOCHAL_DEMO_START_MS`` (the demo sets it
    for every process it starts; else ``.demo/start_ms``, which the demo writes, so ``make ui``
    loads the same job; else now)."""
    from spark_jobs.examples.clickstream import build_job

    value = os.environ.get(START_ENV) or _saved_start()
    start_ms = int(value) if value else time.time_ns() // 1_000_000
    return build_job(start_ms=start_ms, events_per_second=100, **options)


def _saved_start() -> str:
    saved = ROOT / ".demo" / "start_ms"
    return saved.read_text().strip() if saved.is_file() else ""


def logical_date() -> str:
    """A DAG run's logical date: now (``airflow dags test`` also takes it as the run's start)."""
    return datetime.now(tz=UTC).isoformat(timespec="milliseconds")


def task_lines(output: str) -> list[str]:
    """The ``epochal ...`` summary lines the tasks logged (without Airflow's log decoration)."""
    return [
        line.split("epochal ", 1)[1].split(" [airflow")[0]
        for line in output.splitlines()
        if "epochal " in line and " [airflow.task" in line and "epochal progress" not in line
    ]


def restore_plan(output: str) -> list[str]:
    """The whole restore plan the ``epochal_restore`` DAG logged: one log record of several lines,
    which Airflow's console log ends with the logger's name (`` [airflow.task...]``)."""
    if "epochal restore plan:" not in output:
        return []
    text = output.split("epochal restore plan:", 1)[1].split(" [airflow", 1)[0]
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=str(ROOT / ".demo"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--executor", choices=["spark", "local"], default="spark")
    parser.add_argument("--fail-epoch", type=int, default=2)
    args = parser.parse_args(argv)
    base = Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    (base / "airflow").mkdir(parents=True)
    store_uri = (base / "store").as_uri()
    start_ms = time.time_ns() // 1_000_000 - LEAD_MS
    (base / "start_ms").write_text(str(start_ms))
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(base / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "EPOCHAL_JOBS": JOB_REF,
        "EPOCHAL_STORE_URI": store_uri,
        "EPOCHAL_EXECUTOR": args.executor,
        "EPOCHAL_RESTART": "none",
        "PYSPARK_PYTHON": sys.executable,
        START_ENV: str(start_ms),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    began = time.monotonic()
    print(
        f"Epochal demo: Airflow home {base / 'airflow'}, store {store_uri}, executor {args.executor}, "
        "real time (each DAG run's logical date is when it starts)"
    )
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)

    def dag_run(dag_id: str, extra: dict[str, str] | None = None, conf: str = "") -> tuple[str, int, str]:
        date = logical_date()
        command = [airflow, "dags", "test", dag_id, date] + (["-c", conf] if conf else [])
        result = subprocess.run(command, env={**env, **(extra or {})}, capture_output=True, text=True)
        return date, result.returncode, result.stdout + result.stderr

    epoch, run = 1, 0
    while epoch <= args.epochs:
        run += 1
        fault = {"EPOCHAL_FAULT": f"after_ack@{epoch}", "EPOCHAL_FAULT_MODE": "raise"} \
            if epoch == args.fail_epoch and run == epoch else {}  # fmt: skip
        date, code, output = dag_run("epochal_clickstream", fault)
        log = base / f"run-{run}.log"
        log.write_text(output)
        state = "ok" if code == 0 else "FAILED"
        print(f"\nDAG run {run} (epoch {epoch}, logical date {date[:19]}): {state}  log: {log}")
        for line in task_lines(output):
            print(f"  {line}")
        if fault:
            print(
                "  -> injected: run_epoch raised after the epoch's acks; Airflow recorded the failed task "
                "and DAG run; the next run aborts its checkpoint and recovers"
            )
        else:
            epoch += 1

    def manual(dag_id: str, conf: str) -> str:
        _, code, output = dag_run(dag_id, conf=conf)
        (base / f"{dag_id}.log").write_text(output)
        state = "ok" if code == 0 else "FAILED"
        print(f"\nDAG run {dag_id} {conf}: {state}  log: {base / (dag_id + '.log')}")
        return output

    manual("epochal_savepoint", '{"name": "demo"}')
    location = f"{store_uri}/clickstream/savepoints/demo"
    print(f"  savepoint written to {location} (Parquet + JSON manifest, readable without Epochal)")
    logs = manual("epochal_restore", json.dumps({"source": location, "dry_run": False}))
    print("  restore plan:\n    " + "\n    ".join(restore_plan(logs)))
    run += 1
    _, code, output = dag_run("epochal_clickstream")
    (base / f"run-{run}.log").write_text(output)
    state = "ok" if code == 0 else "FAILED"
    print(f"\nDAG run {run} (epoch {args.epochs + 1}, from the restored state): {state}")
    for line in task_lines(output):
        print(f"  {line}")

    from spark_jobs.cli import format_history
    from spark_jobs.sinks import read_committed
    from state_store.core import checkpoint_history
    from state_store.storage import open_store

    store = open_store(store_uri)
    print("\ncheckpoint history (retained checkpoints and the aborted one; durations are wall-clock):")
    print(format_history(checkpoint_history(store, "clickstream")))
    table = read_committed(store, "clickstream", "page-counts-sink").to_pandas()
    print(f"\ncommitted output of page-counts-sink: {len(table)} window rows; the latest:")
    columns = [c for c in table.columns if not c.startswith("_")]
    print(table.sort_values(["window_start", "page"]).tail(8)[columns].to_string(index=False))
    print(f"\ndone in {time.monotonic() - began:.0f} s")
    print(
        "\nNext: look at what the demo did in Airflow's UI -- the DAG runs (the failed one included), "
        f"their task logs and the Checkpoints view:\n  make ui      then open {UI_URL}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
