"""Which jobs get an ``epochal_<job_id>`` DAG, read from the environment only (no I/O at parse time).

* ``EPOCHAL_JOBS`` -- comma-separated job references: example names or ``module:attr``
  (default: every example in ``spark_jobs.examples``);
* ``EPOCHAL_STORE_URI`` -- where job state lives (default ``file://$AIRFLOW_HOME/epochal-store``);
* ``EPOCHAL_STORE_CONN_ID`` -- an Airflow ``aws`` connection for ``s3://`` stores (optional);
* ``EPOCHAL_EXECUTOR`` -- ``spark`` (Spark ``local[*]`` in the worker, default) or ``local``;
* ``EPOCHAL_SCHEDULE`` -- a cron expression or ``@once``-style preset, or ``none`` (default: none,
  runs are triggered by hand or by the tests);
* ``EPOCHAL_RESTART`` -- ``fixed-delay:<retries>:<seconds>``, ``exponential:<retries>:<seconds>:<max
  seconds>`` or ``none`` (default ``fixed-delay:1:5``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any


class EpochalConfigError(ValueError):
    """An Epochal environment setting that cannot be used; the message says the accepted forms."""


@dataclass(frozen=True)
class RestartStrategy:
    """Airflow retry arguments for the epoch's tasks (Flink's restart strategies)."""

    retries: int = 1
    retry_delay: timedelta = timedelta(seconds=5)
    exponential: bool = False
    max_retry_delay: timedelta | None = None

    def task_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"retries": self.retries, "retry_delay": self.retry_delay}
        if self.exponential:
            args["retry_exponential_backoff"] = True
            if self.max_retry_delay is not None:
                args["max_retry_delay"] = self.max_retry_delay
        return args


def parse_restart(text: str) -> RestartStrategy:
    parts = text.strip().split(":")
    try:
        if parts == ["none"]:
            return RestartStrategy(retries=0)
        if parts[0] == "fixed-delay" and len(parts) == 3:
            return RestartStrategy(int(parts[1]), timedelta(seconds=float(parts[2])))
        if parts[0] == "exponential" and len(parts) == 4:
            return RestartStrategy(
                int(parts[1]), timedelta(seconds=float(parts[2])), True, timedelta(seconds=float(parts[3]))
            )
    except ValueError:
        pass
    raise EpochalConfigError(
        f"EPOCHAL_RESTART={text!r} is invalid: use none, fixed-delay:<retries>:<seconds> or "
        "exponential:<retries>:<seconds>:<max seconds>"
    )


@dataclass(frozen=True)
class EpochalSettings:
    jobs: tuple[str, ...]
    store_uri: str
    conn_id: str | None
    executor: str
    schedule: str | None
    restart: RestartStrategy = field(default_factory=RestartStrategy)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> EpochalSettings:
        from spark_jobs.examples import EXAMPLES

        e = dict(os.environ if env is None else env)
        home = e.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
        jobs = tuple(
            j.strip() for j in e.get("EPOCHAL_JOBS", ",".join(sorted(EXAMPLES))).split(",") if j.strip()
        )
        executor = e.get("EPOCHAL_EXECUTOR", "spark")
        if executor not in ("spark", "local"):
            raise EpochalConfigError(f"EPOCHAL_EXECUTOR={executor!r} is invalid: use spark or local")
        schedule = e.get("EPOCHAL_SCHEDULE", "none")
        return cls(
            jobs=jobs,
            store_uri=e.get("EPOCHAL_STORE_URI", f"file://{os.path.abspath(home)}/epochal-store"),
            conn_id=e.get("EPOCHAL_STORE_CONN_ID") or None,
            executor=executor,
            schedule=None if schedule.lower() == "none" else schedule,
            restart=parse_restart(e.get("EPOCHAL_RESTART", "fixed-delay:1:5")),
        )
