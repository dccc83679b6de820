"""Which jobs get an ``epochal_<job_id>`` DAG, read from the environment only (no I/O at parse time).

* ``EPOCHAL_JOBS`` -- comma-separated job references: example names or ``module:attr``
  (default: every example in ``spark_jobs.examples``);
* ``EPOCHAL_STORE_URI`` -- where job state lives (default ``file://$AIRFLOW_HOME/epochal-store``);
* ``EPOCHAL_STORE_CONN_ID`` -- an Airflow ``aws`` connection for ``s3://`` stores (optional);
* ``EPOCHAL_EXECUTOR`` -- ``spark`` (Spark ``local[*]`` in the worker, default), ``local`` (no Spark)
  or ``spark-submit`` (the provider's ``SparkSubmitOperator`` against the cluster of
  ``EPOCHAL_SPARK_CONN_ID``);
* ``EPOCHAL_SPARK_CONN_ID`` -- the Airflow ``spark`` connection naming the master (default
  ``spark_default``; only for ``spark-submit``);
* ``EPOCHAL_SPARK_CONF`` -- extra Spark conf for ``spark-submit``: comma-separated ``spark.key=value``
  pairs (keys must start with ``spark.``; credentials are refused: they come from the store connection);
* ``EPOCHAL_SCHEDULE`` -- a cron expression or ``@once``-style preset, ``assets`` (data-aware: one
  Airflow Asset per source, an asset event makes the next epoch runnable), or ``none`` (default: runs
  are triggered by hand or by the tests);
* ``EPOCHAL_RESTART`` -- ``fixed-delay:<retries>:<seconds>``, ``exponential:<retries>:<seconds>:<max
  seconds>``, ``failure-rate:<max failures>:<interval seconds>`` or ``none`` (default
  ``fixed-delay:1:5``).

Invariant: every value is validated here, at parse time, with a one-line error naming the variable and
the accepted forms; nothing here reads storage or the network.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

EXECUTORS = ("spark", "local", "spark-submit")
KEYS = (
    "EPOCHAL_JOBS",
    "EPOCHAL_STORE_URI",
    "EPOCHAL_STORE_CONN_ID",
    "EPOCHAL_EXECUTOR",
    "EPOCHAL_SPARK_CONN_ID",
    "EPOCHAL_SPARK_CONF",
    "EPOCHAL_SCHEDULE",
    "EPOCHAL_LANDING_POLL_S",
    "EPOCHAL_RESTART",
    "EPOCHAL_SNAPSHOT_ROOTS",
    "EPOCHAL_MONITOR_JOBS",
)
_SECRET_CONF = re.compile(r"secret|password|token|access[._]?key|credential", re.IGNORECASE)


class EpochalConfigError(ValueError):
    """An Epochal environment setting that cannot be used; the message says the accepted forms."""


@dataclass(frozen=True)
class RestartStrategy:
    """Airflow retry arguments for the epoch's tasks (Flink's restart strategies).

    ``failure-rate`` (Flink's failure-rate strategy): every failed run is one failure, retried by the
    next run (task retries 0); the trigger task of a run counts the job's aborted checkpoints decided
    within the last ``failure_interval`` (the run's clock) and, when more than ``max_failures``, fails
    the run and pauses the DAG.
    """

    retries: int = 1
    retry_delay: timedelta = timedelta(seconds=5)
    exponential: bool = False
    max_retry_delay: timedelta | None = None
    max_failures: int | None = None
    failure_interval: timedelta | None = None

    @property
    def failure_rate(self) -> bool:
        return self.max_failures is not None

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
        if parts[0] == "fixed-delay" and len(parts) == 3 and int(parts[1]) >= 0:
            return RestartStrategy(int(parts[1]), timedelta(seconds=float(parts[2])))
        if parts[0] == "exponential" and len(parts) == 4 and int(parts[1]) >= 0:
            return RestartStrategy(
                int(parts[1]), timedelta(seconds=float(parts[2])), True, timedelta(seconds=float(parts[3]))
            )
        if parts[0] == "failure-rate" and len(parts) == 3 and int(parts[1]) >= 0 and float(parts[2]) > 0:
            return RestartStrategy(
                retries=0, max_failures=int(parts[1]), failure_interval=timedelta(seconds=float(parts[2]))
            )
    except ValueError:
        pass
    raise EpochalConfigError(
        f"EPOCHAL_RESTART={text!r} is invalid: use none, fixed-delay:<retries>:<seconds>, "
        "exponential:<retries>:<seconds>:<max seconds> or failure-rate:<max failures>:<interval seconds>"
    )


def parse_spark_conf(text: str) -> dict[str, str]:
    """``spark.a=1,spark.b=x`` -> a dict; refuses non-Spark keys and anything that looks like a secret."""
    conf: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith("spark.") or not value.strip():
            raise EpochalConfigError(
                f"EPOCHAL_SPARK_CONF item {item!r} is invalid: use comma-separated spark.<key>=<value> pairs"
            )
        if _SECRET_CONF.search(key):
            raise EpochalConfigError(
                f"EPOCHAL_SPARK_CONF key {key!r} looks like a credential: put credentials in the store "
                "connection (EPOCHAL_STORE_CONN_ID), never in Spark conf settings"
            )
        conf[key] = value.strip()
    return conf


def parse_schedule(text: str) -> str | None:
    """``none`` -> None; ``assets`` -> ``"assets"`` (the DAG factory builds the Asset list); else cron."""
    value = text.strip()
    if value.lower() == "none":
        return None
    if value.lower() == "assets":
        return "assets"
    if not value:
        raise EpochalConfigError("EPOCHAL_SCHEDULE is empty: use none, assets, a cron expression or @daily")
    return value


def check_for_typos(env: dict[str, str]) -> None:
    """Refuse an ``EPOCHAL_*`` variable that is a near miss of a setting (``EPOCHAL_EXECUTER``): it
    would silently leave the setting at its default. Other ``EPOCHAL_*`` variables (the fault kit's,
    the deployment's) are not this module's business and pass."""
    for name in env:
        if not name.startswith("EPOCHAL_") or name in KEYS:
            continue
        close = difflib.get_close_matches(name, KEYS, n=1, cutoff=0.85)
        if close:
            raise EpochalConfigError(f"{name} is not an Epochal setting: did you mean {close[0]}?")


def parse_poll(text: str) -> float:
    """``EPOCHAL_LANDING_POLL_S``: seconds > 0 between two listings of a watched landing zone."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise EpochalConfigError(
            f"EPOCHAL_LANDING_POLL_S={text!r} is invalid: use the seconds between two listings, e.g. 30"
        )
    return seconds


@dataclass(frozen=True)
class EpochalSettings:
    jobs: tuple[str, ...]
    store_uri: str
    conn_id: str | None
    executor: str
    schedule: str | None
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, str] = field(default_factory=dict)
    landing_poll_s: float = 30.0
    """``EPOCHAL_LANDING_POLL_S``: how often a landing zone's watcher lists its prefix (assets schedule)."""

    @property
    def data_aware(self) -> bool:
        return self.schedule == "assets"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> EpochalSettings:
        from spark_jobs.examples import EXAMPLES

        e = dict(os.environ if env is None else env)
        check_for_typos(e)
        home = e.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))
        jobs = _names(e.get("EPOCHAL_JOBS", ",".join(sorted(EXAMPLES))))
        executor = e.get("EPOCHAL_EXECUTOR", "spark")
        if executor not in EXECUTORS:
            raise EpochalConfigError(
                f"EPOCHAL_EXECUTOR={executor!r} is invalid: use spark, local or spark-submit"
            )
        spark_conn_id = e.get("EPOCHAL_SPARK_CONN_ID", "").strip() or "spark_default"
        return cls(
            jobs=jobs,
            store_uri=e.get("EPOCHAL_STORE_URI", f"file://{os.path.abspath(home)}/epochal-store"),
            conn_id=e.get("EPOCHAL_STORE_CONN_ID") or None,
            executor=executor,
            schedule=parse_schedule(e.get("EPOCHAL_SCHEDULE", "none")),
            restart=parse_restart(e.get("EPOCHAL_RESTART", "fixed-delay:1:5")),
            spark_conn_id=spark_conn_id,
            spark_conf=parse_spark_conf(e.get("EPOCHAL_SPARK_CONF", "")),
            landing_poll_s=parse_poll(e.get("EPOCHAL_LANDING_POLL_S", "30")),
        )


def snapshot_roots(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``EPOCHAL_SNAPSHOT_ROOTS``: the storage URIs a restore's savepoint location must lie under
    (besides the job's own store); empty when unset (any location)."""
    from spark_jobs.lifecycle.restore import roots_from_text

    e = os.environ if env is None else env
    return roots_from_text(e.get("EPOCHAL_SNAPSHOT_ROOTS", ""))


def monitored_jobs(env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Checkpoints view's jobs: ``EPOCHAL_JOBS`` (default: every example) and the extra job ids
    of ``EPOCHAL_MONITOR_JOBS`` (jobs with state in the store but no DAG here)."""
    e = os.environ if env is None else env
    refs = _names(e.get("EPOCHAL_JOBS", ""))
    if not refs:
        from spark_jobs.examples import EXAMPLES

        refs = tuple(sorted(EXAMPLES))
    return refs, _names(e.get("EPOCHAL_MONITOR_JOBS", ""))


def _names(text: str) -> tuple[str, ...]:
    return tuple(j.strip() for j in text.split(",") if j.strip())
