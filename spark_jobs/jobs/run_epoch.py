"""Run one epoch (checkpoint n, a new attempt) of a job: ``spark-submit run_epoch.py --job J
--store URI --checkpoint N`` or in process. Exit codes: 0 ok, 1 failure, 2 bad usage."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_epoch", description=__doc__)
    parser.add_argument("--job", required=True, help="example name or module:attr")
    parser.add_argument("--store", required=True, help="storage URI")
    parser.add_argument("--checkpoint", type=int, required=True, help="the pending checkpoint id")
    parser.add_argument("--executor", choices=["spark", "local"], default="spark")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: from spark-submit or local[*])"
    )
    parser.add_argument("--drain", action="store_true", help="end of input: fire every timer")
    args = parser.parse_args(argv)

    from spark_jobs.jobs.loading import load_job
    from spark_jobs.runtime.cycle import run_epoch
    from spark_jobs.runtime.spark_session import get_spark
    from state_store.clock import SystemClock
    from state_store.testing.killpoints import kill_switch_from_env

    job = load_job(args.job)
    spark = get_spark(args.master or "local[*]") if args.executor == "spark" else None
    summaries = run_epoch(
        job,
        args.store,
        args.checkpoint,
        SystemClock(),
        executor=args.executor,
        spark=spark,
        drain=args.drain,
        kill=kill_switch_from_env(),
    )
    print(f"epoch {args.checkpoint} of job {job.job_id}: {len(summaries)} subtask summaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
