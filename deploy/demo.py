"""``make demo``: the example pipeline end to end on the embedded default -- local store, Spark
``local[*]``, real Airflow with SQLite (``airflow dags test``) -- including one injected failure.

1. a fresh AIRFLOW_HOME under ``.demo/`` and ``airflow db migrate``;
2. epochs 1..N of ``epochal_clickstream``, one DAG run each (logical date = the epoch's end);
3. the run of epoch 2 is killed inside ``run_epoch`` after its acks (``EPOCHAL_FAULT=after_ack``,
   the worker process dies); the next run aborts the dead run's checkpoint and recovers;
4. ``epochal_savepoint`` takes savepoint ``demo``; ``epochal_restore`` restores the job from it
   (its plan is printed) and one more epoch runs from the restored state -- every epoch's
   ``validate`` task checks the checkpoint with Great Expectations;
5. the checkpoint history and the latest committed window counts are printed.
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

ROOT = Path(__file__).resolve().parents[1]
STEP_MS = 10_000


def logical_date(epoch: int) -> str:
    from spark_jobs.sources.generator import DEFAULT_START_MS

    return datetime.fromtimestamp((DEFAULT_START_MS + epoch * STEP_MS) / 1000, tz=UTC).isoformat()


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
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(base / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "EPOCHAL_JOBS": "clickstream",
        "EPOCHAL_STORE_URI": store_uri,
        "EPOCHAL_EXECUTOR": args.executor,
        "EPOCHAL_RESTART": "none",
        "PYSPARK_PYTHON": sys.executable,
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    began = time.monotonic()
    print(f"Epochal demo: Airflow home {base / 'airflow'}, store {store_uri}, executor {args.executor}")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    epoch, runs = 1, 0
    while epoch <= args.epochs:
        fault = {"EPOCHAL_FAULT": f"after_ack@{epoch}", "EPOCHAL_FAULT_MODE": "exit"} \
            if runs == args.fail_epoch - 1 else {}  # fmt: skip
        result = subprocess.run(
            [airflow, "dags", "test", "epochal_clickstream", logical_date(epoch)],
            env={**env, **fault},
            capture_output=True,
            text=True,
        )
        runs += 1
        log = base / f"run-{runs}.log"
        log.write_text(result.stdout + result.stderr)
        summary = [
            line.split("epochal ", 1)[1].split(" [airflow")[0]
            for line in (result.stdout + result.stderr).splitlines()
            if "] epochal " in f"] {line}" and "epochal " in line and " [airflow.task" in line
        ]
        state = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"\nDAG run {runs} (epoch {epoch}, logical date {logical_date(epoch)}): {state}  log: {log}")
        for line in summary:
            print(f"  {line}")
        if fault:
            print("  -> injected: the worker died after the acks of this epoch; the next run recovers")
        else:
            epoch += 1

    def manual(dag_id: str, conf: str) -> str:
        result = subprocess.run(
            [airflow, "dags", "test", dag_id, logical_date(args.epochs), "-c", conf],
            env=env,
            capture_output=True,
            text=True,
        )
        output = result.stdout + result.stderr
        (base / f"{dag_id}.log").write_text(output)
        state = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"\nDAG run {dag_id} {conf}: {state}  log: {base / (dag_id + '.log')}")
        return output

    manual("epochal_savepoint", '{"name": "demo"}')
    location = f"{store_uri}/clickstream/savepoints/demo"
    print(f"  savepoint written to {location} (Parquet + JSON manifest, readable without Epochal)")
    logs = manual("epochal_restore", json.dumps({"source": location, "dry_run": False}))
    plan = logs.split("epochal restore plan:", 1)[-1].split("[airflow", 1)[0].strip().splitlines()
    print("  restore plan:\n    " + "\n    ".join(line for line in plan[:8]))
    result = subprocess.run(
        [airflow, "dags", "test", "epochal_clickstream", logical_date(args.epochs + 1)],
        env=env,
        capture_output=True,
        text=True,
    )
    print(
        f"\nDAG run (epoch {args.epochs + 1}, from the restored state): "
        f"{'ok' if result.returncode == 0 else 'FAILED'}"
    )
    for line in (result.stdout + result.stderr).splitlines():
        if "] epochal " in f"] {line}" and " [airflow.task" in line:
            print("  " + line.split("epochal ", 1)[1].split(" [airflow")[0])

    from spark_jobs.cli import format_history
    from spark_jobs.sinks import read_committed
    from state_store.core import checkpoint_history
    from state_store.storage import open_store

    store = open_store(store_uri)
    print("\ncheckpoint history (retained checkpoints and the aborted one):")
    print(format_history(checkpoint_history(store, "clickstream")))
    table = read_committed(store, "clickstream", "page-counts-sink").to_pandas()
    print(f"\ncommitted output of page-counts-sink: {len(table)} window rows; the latest:")
    print(table.sort_values(["window_start", "page"]).tail(8).drop(columns=["_ts"]).to_string(index=False))
    print(f"\ndone in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
