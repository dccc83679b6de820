"""Run one epoch (checkpoint n, a new attempt) of a job: ``spark-submit run_epoch.py --job J
--store URI --checkpoint N`` or in process. Exit codes: 0 ok, 1 failure, 2 bad usage.

Under ``spark-submit`` the master comes from spark-submit (``--master`` here overrides it) and the
storage credentials of this driver's environment (``AWS_*``) are forwarded to the executors as
``spark.executorEnv.*`` Spark conf -- never through files -- with ``spark.redaction.regex`` extended
so Spark redacts them wherever it shows its conf. The store URI carries no credentials.

An executor lost mid-epoch fails the epoch at once (``--on-executor-loss fail``, the default; see
``spark_jobs.jobs.watchdog``) instead of leaving it waiting for resources: the next attempt restores
from the latest completed checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

FORWARDED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)
REDACTION_REGEX = r"(?i)secret|password|token|access[._]?key"


def executor_conf(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Spark conf giving the executors this process's storage settings (``spark.executorEnv.*``)."""
    env = os.environ if environ is None else environ
    conf = {f"spark.executorEnv.{name}": env[name] for name in FORWARDED_ENV if env.get(name)}
    conf["spark.redaction.regex"] = REDACTION_REGEX
    return conf


def session(master: str | None, app_name: str) -> Any:
    """Under spark-submit: a session on spark-submit's master with :func:`executor_conf`; otherwise
    the embedded ``local[*]`` session."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        from spark_jobs.runtime.spark_session import get_spark

        return get_spark(master or "local[*]", app_name, conf=executor_conf())
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in executor_conf().items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_epoch", description=__doc__)
    parser.add_argument("--job", required=True, help="example name or module:attr")
    parser.add_argument("--store", required=True, help="storage URI")
    parser.add_argument("--checkpoint", type=int, required=True, help="the pending checkpoint id")
    parser.add_argument("--executor", choices=["spark", "local"], default="spark")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: from spark-submit or local[*])"
    )
    parser.add_argument("--now-ms", type=int, default=None, help="the epoch's clock (default: wall clock)")
    parser.add_argument("--drain", action="store_true", help="end of input: fire every timer")
    parser.add_argument(
        "--lease-token",
        type=int,
        default=None,
        help="the fencing token of the job's lease the caller holds (the Airflow task that submitted this)",
    )
    parser.add_argument(
        "--on-executor-loss",
        choices=["fail", "wait"],
        default="fail",
        help="an executor lost mid-epoch fails the epoch (default) or Spark waits for new resources",
    )
    args = parser.parse_args(argv)

    from spark_jobs.jobs.loading import load_job
    from spark_jobs.jobs.watchdog import ExecutorLossWatchdog
    from spark_jobs.runtime.cycle import run_epoch
    from state_store.clocks import ManualClock, SystemClock
    from state_store.faults import kill_switch_from_env

    job = load_job(args.job)
    spark = session(args.master, f"epochal-{job.job_id}") if args.executor == "spark" else None
    watchdog = ExecutorLossWatchdog(spark) if spark is not None and args.on_executor_loss == "fail" else None
    try:
        with watchdog or contextlib.nullcontext():
            try:
                summaries = run_epoch(
                    job,
                    args.store,
                    args.checkpoint,
                    ManualClock(args.now_ms) if args.now_ms is not None else SystemClock(),
                    executor=args.executor,
                    spark=spark,
                    drain=args.drain,
                    kill=kill_switch_from_env(os.environ),
                    lease_token=args.lease_token,
                )
            except Exception:
                lost = watchdog.error() if watchdog is not None else None
                if lost is None:
                    raise
                print(f"run_epoch: {lost}", file=sys.stderr)
                return 1
    finally:
        if spark is not None and "PYSPARK_GATEWAY_PORT" in os.environ:
            spark.stop()
    rows = sum(int(s.get("rows_out", 0)) for s in summaries)
    print(f"epoch {args.checkpoint} of job {job.job_id}: {len(summaries)} subtask summaries, rows_out={rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
