"""``run_epoch`` on a Spark cluster: the Apache Spark provider's ``SparkSubmitOperator`` submitting
``spark_jobs/jobs/run_epoch.py`` (client deploy mode: the driver -- the epoch's coordinator side --
runs in the Airflow worker, its executors on the cluster of the Spark connection).

Storage settings reach the executors through Spark conf only, never through files on the driver:

* the store URI (with the connection's endpoint and region, never its keys) is an application
  argument;
* the store connection's keys go into the environment of the ``spark-submit`` process only (not its
  command line, not a templated field, not an XCom); ``run_epoch.py`` forwards them to the executors
  as ``spark.executorEnv.*`` conf and extends ``spark.redaction.regex`` so Spark redacts them too.

Cluster requirements: the executors' Python (``spark.pyspark.python``, default this worker's
interpreter -- override with ``EPOCHAL_SPARK_CONF`` when the cluster's differs) must import
``spark_jobs``, ``state_store`` and the job's module (install Epochal on the workers, or set
``spark.executorEnv.PYTHONPATH``). YARN/Kubernetes masters with store keys are refused (the provider
would put the keys on the command line), and so is ``deploy-mode cluster``.

Invariant: a retried task is a new ``spark-submit``, i.e. a new attempt of the same checkpoint that
restores from the latest completed checkpoint (earlier attempts' acks are fenced).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException

from epochal_airflow.hooks.store import EpochalStoreHook

RUN_EPOCH = str(Path(__file__).resolve().parents[3] / "spark_jobs" / "jobs" / "run_epoch.py")


def ensure_spark_submit_on_path() -> str:
    """The ``spark-submit`` the provider will run: the one on PATH, else the installed pyspark's
    (its ``bin`` is put in front of this process's PATH); ``SPARK_HOME`` defaults to the installed
    pyspark (pip's ``spark-submit`` wrapper cannot always find it by itself)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    os.environ.setdefault("SPARK_HOME", str(home))
    found = shutil.which("spark-submit")
    if found:
        return found
    if not (home / "bin" / "spark-submit").exists():
        raise AirflowException(
            "spark-submit not found: put Spark's bin directory on PATH or install pyspark in this environment"
        )
    os.environ["PATH"] = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return str(home / "bin" / "spark-submit")


class SparkSubmitEpochOperator(SparkSubmitOperator):
    """Run epoch n of ``job`` with ``spark-submit`` against the cluster of ``spark_conn_id``."""

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "job_ref", "store_uri")
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        job: str,
        store_uri: str,
        store_conn_id: str | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, str] | None = None,
        trigger_task_id: str = "trigger_checkpoint",
        application: str = RUN_EPOCH,
        **kwargs: Any,
    ) -> None:
        conf = {
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.ui.showConsoleProgress": "false",
            **(spark_conf or {}),
        }
        kwargs.setdefault("name", f"epochal-{job}")
        super().__init__(application=application, conn_id=spark_conn_id, conf=conf, **kwargs)
        self.job_ref = job
        self.store_uri = store_uri
        self.store_conn_id = store_conn_id
        self.spark_conn_id = spark_conn_id
        self.trigger_task_id = trigger_task_id
        self._credential_env: dict[str, str] = {}

    def _get_hook(self) -> Any:
        hook = super()._get_hook()
        if self._credential_env:  # the spark-submit process's environment only (client mode)
            hook._env_vars = {**(hook._env_vars or {}), **self._credential_env}
        return hook

    def execute(self, context: Any, event: Any = None) -> dict[str, Any]:  # type: ignore[override]
        from epochal_airflow.operators.checkpoint import run_clock

        value = context["ti"].xcom_pull(task_ids=self.trigger_task_id)
        if not value or "checkpoint_id" not in value:
            raise AirflowException(
                f"no checkpoint id from task {self.trigger_task_id!r}: it did not trigger one"
            )
        n = int(value["checkpoint_id"])
        store = EpochalStoreHook(self.store_uri, self.store_conn_id)
        self._credential_env = store.credential_env()
        lease = self._hold_lease(context, store)
        self.application_args = [
            "--job", self.job_ref,
            "--store", store.resolved_uri(),
            "--checkpoint", str(n),
            "--now-ms", str(run_clock(context).now_ms()),
            "--lease-token", str(lease.token),
        ]  # fmt: skip
        try:
            return self._submit(context, n)
        except BaseException:
            if int(context["ti"].try_number) > int(self.retries or 0):
                lease.release()
            else:
                lease.detach()
            raise
        finally:
            lease.detach()  # kept for the run's next task

    def _hold_lease(self, context: Any, store: EpochalStoreHook) -> Any:
        """The job's lease for this DAG run, renewed while spark-submit runs (see ``checkpoint``)."""
        from epochal_airflow.operators.checkpoint import AIRFLOW_LEASE_TTL_MS
        from epochal_airflow.triggers.lease import LeaseFreeTrigger
        from spark_jobs.jobs.loading import load_job
        from state_store.core.lease import LeaseHeldError
        from state_store.lease_keeper import HeldLease

        job = load_job(self.job_ref)
        ti = context["ti"]
        holder = f"airflow:{ti.dag_id}:{context['run_id']}"
        held = HeldLease(
            store.get_store(), job.job_id, holder, f"{ti.dag_id}.{ti.task_id}",
            max_parallelism=job.max_parallelism, ttl_ms=AIRFLOW_LEASE_TTL_MS,
        )  # fmt: skip
        try:
            held.acquire()
        except LeaseHeldError as busy:
            self.log.info("epochal run_epoch: %s; deferring until the job's lease is free", busy)
            self.defer(
                trigger=LeaseFreeTrigger(store.resolved_uri(), job.job_id, holder, 5.0), method_name="execute"
            )
        return held

    def _submit(self, context: Any, n: int) -> dict[str, Any]:
        ensure_spark_submit_on_path()
        self._hook = self._get_hook()  # built now, with this run's arguments and environment
        if self._hook._connection.get("deploy_mode") == "cluster":
            raise AirflowException(
                f"Spark connection {self.spark_conn_id!r} asks for deploy-mode cluster: run_epoch needs "
                "client mode (the driver runs in the Airflow worker); remove deploy-mode from its extras"
            )
        if self._credential_env and (self._hook._is_yarn or self._hook._is_kubernetes):
            # the provider would put them on the spark-submit command line (appMasterEnv/driverEnv)
            raise AirflowException(
                f"store connection {self.store_conn_id!r} has keys but Spark connection "
                f"{self.spark_conn_id!r} is YARN/Kubernetes, where they would reach the command line: give "
                "the cluster its own storage credentials (instance role, secret) and drop the keys"
            )
        super().execute(context)
        master = self._hook._connection["master"] if self._hook is not None else "?"
        fields = {"checkpoint_id": n, "try_number": context["ti"].try_number, "master": master}
        line = " ".join(f"{k}={v}" for k, v in fields.items())
        self.log.info("epochal run_epoch: job=%s %s", self.job_ref, line)
        return fields
