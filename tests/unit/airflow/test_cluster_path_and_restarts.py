"""The cluster path (``EPOCHAL_EXECUTOR=spark-submit``), data-aware schedules and the failure-rate
restart strategy, below the integration tests: settings validation, the DAG objects, what the
provider's ``spark-submit`` actually receives (a recording ``spark-submit`` on PATH), the Spark conf
that carries credentials to executors, and failure counting from storage."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest
from epochal_airflow.config import EpochalConfigError, EpochalSettings, parse_restart, parse_spark_conf
from epochal_airflow.dag_factory import build_epoch_dag, source_asset
from epochal_airflow.operators.restart import failure_rate
from epochal_airflow.operators.spark_submit import RUN_EPOCH, SparkSubmitEpochOperator

from spark_jobs.jobs.run_epoch import REDACTION_REGEX, executor_conf
from spark_jobs.runtime.cycle import abort_abandoned, trigger_epoch
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, new_clock, small_job

SECRET = "s3cr3t-VALUE-never-logged"
ACCESS = "AKIAEPOCHALTEST"


def settings(**env: str) -> EpochalSettings:
    return EpochalSettings.from_env({"AIRFLOW_HOME": "/h", "EPOCHAL_JOBS": "clickstream", **env})


def test_cluster_settings_are_validated_with_the_accepted_forms() -> None:
    s = settings(
        EPOCHAL_EXECUTOR="spark-submit",
        EPOCHAL_SPARK_CONN_ID="my_spark",
        EPOCHAL_SPARK_CONF="spark.executor.memory=512m, spark.cores.max=2",
    )
    assert (s.executor, s.spark_conn_id) == ("spark-submit", "my_spark")
    assert s.spark_conf == {"spark.executor.memory": "512m", "spark.cores.max": "2"}
    assert settings().spark_conn_id == "spark_default" and settings().spark_conf == {}
    with pytest.raises(EpochalConfigError, match=r"spark\.<key>=<value>"):
        parse_spark_conf("executor.memory=1g")
    with pytest.raises(EpochalConfigError, match=r"spark\.<key>=<value>"):
        parse_spark_conf("spark.executor.memory")
    for key in ("spark.executorEnv.AWS_SECRET_ACCESS_KEY", "spark.hadoop.fs.s3a.access.key"):
        with pytest.raises(EpochalConfigError, match=r"looks like a credential.*EPOCHAL_STORE_CONN_ID"):
            parse_spark_conf(f"{key}=x")


def test_restart_and_schedule_forms() -> None:
    rate = parse_restart("failure-rate:2:600")
    assert rate.failure_rate and rate.max_failures == 2 and rate.failure_interval.total_seconds() == 600
    assert rate.task_args()["retries"] == 0  # each failed run is one failure; the next run restarts
    for bad in ("failure-rate:2", "failure-rate:-1:60", "failure-rate:1:0", "fixed-delay:-1:5"):
        with pytest.raises(EpochalConfigError, match="failure-rate:<max failures>:<interval seconds>"):
            parse_restart(bad)
    assert settings(EPOCHAL_SCHEDULE="assets").data_aware
    assert settings(EPOCHAL_SCHEDULE="*/5 * * * *").schedule == "*/5 * * * *"
    with pytest.raises(EpochalConfigError, match="EPOCHAL_SCHEDULE"):
        settings(EPOCHAL_SCHEDULE=" ")


def test_data_aware_dag_is_scheduled_on_one_asset_per_source() -> None:
    dag = build_epoch_dag("clickstream", settings(EPOCHAL_SCHEDULE="assets"))
    assert type(dag.timetable).__name__ == "AssetTriggeredTimetable"
    uris = {a.uri for a in dag.timetable.asset_condition.objects}
    assert uris == {"epochal://clickstream/sources/clicks"}
    assert type(dag.timetable.asset_condition).__name__ == "AssetAny"  # any source's new input
    cron = build_epoch_dag("clickstream", settings(EPOCHAL_SCHEDULE="@hourly"))
    assert type(cron.timetable).__name__ != "AssetTriggeredTimetable"
    located = SimpleNamespace(uid="orders", location="s3://landing/orders/")
    assert source_asset(SimpleNamespace(job_id="shop"), located).uri == "s3://landing/orders"  # normalized


def test_failure_rate_dag_wires_the_trigger_and_spark_submit_run_epoch() -> None:
    dag = build_epoch_dag(
        "clickstream",
        settings(EPOCHAL_EXECUTOR="spark-submit", EPOCHAL_RESTART="failure-rate:1:3600"),
    )
    trigger, run = dag.get_task("trigger_checkpoint"), dag.get_task("run_epoch")
    assert (trigger.max_failures, trigger.failure_interval_s) == (1, 3600.0)
    assert isinstance(run, SparkSubmitEpochOperator) and run.application == RUN_EPOCH
    assert run.conf["spark.pyspark.python"] == sys.executable and run.retries == 0
    plain = build_epoch_dag("clickstream", settings(EPOCHAL_EXECUTOR="local"))
    assert plain.get_task("trigger_checkpoint").max_failures is None


def test_executor_conf_forwards_storage_settings_that_spark_redacts() -> None:
    conf = executor_conf({"AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "HOME": "/root"})
    assert conf["spark.executorEnv.AWS_ACCESS_KEY_ID"] == ACCESS
    assert conf["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] == SECRET
    assert not any("HOME" in k for k in conf)
    pattern = re.compile(REDACTION_REGEX.removeprefix("(?i)"), re.IGNORECASE)
    assert all(pattern.search(k) for k in conf if k.startswith("spark.executorEnv."))


@pytest.fixture
def recording_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``spark-submit`` on PATH that records its argv and which AWS variables it got."""
    record = tmp_path / "record.json"
    script = tmp_path / "bin" / "spark-submit"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': {{k: v for k, v in os.environ.items() "
        f"if k.startswith('AWS_')}}}}, open({str(record)!r}, 'w'))\n"
        "print('spark-submit ran')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    connection = {"conn_type": "aws", "login": ACCESS, "password": SECRET,
                  "extra": {"endpoint_url": "http://127.0.0.1:8333", "region_name": "us-east-1"}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_EPOCHAL_S3", json.dumps(connection))
    spark = {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}
    monkeypatch.setenv("AIRFLOW_CONN_EPOCHAL_SPARK", json.dumps(spark))
    # no S3 server behind the connection: the job's lease is held by a stand-in (what the task does
    # with the lease is tested against a real store in tests/integration/airflow/)
    held = SimpleNamespace(token=42, detach=lambda: None, release=lambda: True)
    monkeypatch.setattr(SparkSubmitEpochOperator, "_hold_lease", lambda self, context, store: held)
    return record


def test_spark_submit_gets_credentials_in_its_environment_only(
    recording_spark_submit: Path, caplog: pytest.LogCaptureFixture
) -> None:
    op = SparkSubmitEpochOperator(
        task_id="run_epoch",
        job="clickstream",
        store_uri="s3://bucket/jobs",
        store_conn_id="epochal_s3",
        spark_conn_id="epochal_spark",
        spark_conf={"spark.executor.memory": "512m"},
    )
    ti: Any = SimpleNamespace(xcom_pull=lambda task_ids: {"checkpoint_id": 7}, try_number=1)
    end = pendulum.datetime(2024, 1, 1, tz="UTC")
    result = op.execute({"ti": ti, "data_interval_end": end})
    record = json.loads(recording_spark_submit.read_text())
    argv = record["argv"]
    assert argv[:2] == ["--master", "spark://127.0.0.1:7077"]
    assert "spark.executor.memory=512m" in argv and argv[argv.index("--checkpoint") + 1] == "7"
    assert argv[argv.index("--store") + 1] == (
        "s3://bucket/jobs?endpoint_url=http%3A%2F%2F127.0.0.1%3A8333&region=us-east-1"
    )
    assert argv[argv.index("--now-ms") + 1] == str(int(end.timestamp() * 1000))
    assert argv[argv.index("--lease-token") + 1] == "42"  # the submitted driver is fenced by it
    assert RUN_EPOCH in argv
    assert record["env"]["AWS_SECRET_ACCESS_KEY"] == SECRET and record["env"]["AWS_ACCESS_KEY_ID"] == ACCESS
    assert SECRET not in " ".join(argv) and ACCESS not in " ".join(argv)
    assert result == {"checkpoint_id": 7, "try_number": 1, "master": "spark://127.0.0.1:7077"}
    assert SECRET not in json.dumps(result) and SECRET not in caplog.text and ACCESS not in caplog.text
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ  # the worker process itself is untouched


def test_failure_rate_counts_aborted_checkpoints_within_the_interval(tmp_path: Path) -> None:
    job, clock, store = small_job(), new_clock(), open_store((tmp_path / "s").as_uri())
    for run in ("run-1", "run-2"):  # two runs die after triggering; the next run aborts each
        clock.advance(STEP_MS)
        trigger_epoch(job, store, clock, request_id=run)
        clock.advance(STEP_MS)
        abort_abandoned(job, store, clock, request_id=f"after-{run}")
    now = clock.now_ms()
    rate = failure_rate(store, job.job_id, now, max_failures=1, interval_s=3600)
    assert rate.failures == [1, 2] and rate.exceeded
    assert "2 failed checkpoints [1, 2] within 3600s (max 1)" in rate.reason(job.job_id)
    assert not failure_rate(store, job.job_id, now, max_failures=2, interval_s=3600).exceeded
    recent = failure_rate(store, job.job_id, now, max_failures=1, interval_s=(STEP_MS + 1) / 1000)
    assert recent.failures == [2] and not recent.exceeded  # the older failure left the interval


def test_spark_submit_refuses_cluster_deploy_mode_with_the_remedy(
    recording_spark_submit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
             "extra": {"deploy-mode": "cluster"}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_EPOCHAL_SPARK", json.dumps(spark))
    op = SparkSubmitEpochOperator(
        task_id="run_epoch", job="clickstream", store_uri="file:///tmp/x", spark_conn_id="epochal_spark"
    )
    ti: Any = SimpleNamespace(xcom_pull=lambda task_ids: {"checkpoint_id": 1}, try_number=1)
    with pytest.raises(Exception, match=r"needs client mode.*remove deploy-mode"):
        op.execute({"ti": ti, "data_interval_end": pendulum.datetime(2024, 1, 1, tz="UTC")})
    assert not recording_spark_submit.exists()  # nothing was submitted


def test_spark_submit_refuses_to_put_keys_on_a_yarn_command_line(
    recording_spark_submit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_EPOCHAL_SPARK", json.dumps({"conn_type": "spark", "host": "yarn"}))
    op = SparkSubmitEpochOperator(
        task_id="run_epoch",
        job="clickstream",
        store_uri="s3://bucket/jobs",
        store_conn_id="epochal_s3",
        spark_conn_id="epochal_spark",
    )
    ti: Any = SimpleNamespace(xcom_pull=lambda task_ids: {"checkpoint_id": 1}, try_number=1)
    with pytest.raises(Exception, match=r"YARN/Kubernetes.*drop the keys"):
        op.execute({"ti": ti, "data_interval_end": pendulum.datetime(2024, 1, 1, tz="UTC")})
    assert not recording_spark_submit.exists()


class _Executors:
    """The driver's view the watchdog polls (``sc._jsc.sc().getExecutorIds().mkString(",")``)."""

    def __init__(self, ids: list[str]) -> None:
        self.ids, self.cancelled = ids, 0

    def mkString(self, sep: str) -> str:  # Scala's name
        return sep.join(self.ids)


def _spark(executors: _Executors) -> Any:
    sc = SimpleNamespace(cancelAllJobs=lambda: setattr(executors, "cancelled", executors.cancelled + 1))
    sc._jsc = SimpleNamespace(sc=lambda: SimpleNamespace(getExecutorIds=lambda: executors))
    return SimpleNamespace(sparkContext=sc)


def test_executor_loss_watchdog_cancels_the_epoch_and_names_the_lost_executors() -> None:
    import time

    from spark_jobs.jobs.watchdog import ExecutorLossWatchdog

    executors = _Executors(["0", "1"])
    with ExecutorLossWatchdog(_spark(executors), interval_s=0.01) as watchdog:
        time.sleep(0.05)
        assert executors.cancelled == 0 and watchdog.error() is None  # nothing lost yet
        executors.ids = ["1", "2"]  # 0 died; 2 is new
        deadline = time.monotonic() + 5
        while not executors.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
    assert executors.cancelled == 1 and watchdog.lost == {"0"}
    assert "executor(s) 0 lost mid-epoch" in str(watchdog.error())
    local = _Executors([])  # local[*]: no executors besides the driver -> inert
    with ExecutorLossWatchdog(_spark(local), interval_s=0.01):
        time.sleep(0.05)
    assert local.cancelled == 0


def test_a_near_miss_of_a_setting_is_refused_other_epochal_variables_pass() -> None:
    with pytest.raises(EpochalConfigError, match="EPOCHAL_EXECUTER is not an Epochal setting: did you mean"):
        settings(EPOCHAL_EXECUTER="local")
    assert settings(EPOCHAL_FAULT="after_ack@3", EPOCHAL_SNAPSHOT_ROOTS="/x").executor == "spark"
