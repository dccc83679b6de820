"""Issue 10 part 1: the epoch job on a real Spark standalone cluster (a master and a worker on
127.0.0.1 started from the installed pyspark), submitted by real Airflow (``airflow dags test``)
through the provider's ``SparkSubmitOperator`` (``EPOCHAL_EXECUTOR=spark-submit``,
``spark-submit --master spark://127.0.0.1:<port>``) against the session SeaweedFS S3 server:

1. the worker JVM and its executor are SIGKILLed while the epoch's tasks run: the driver's
   executor-loss watchdog fails the epoch at once (no hang waiting for resources), the DAG run fails
   and its checkpoint never completes;
2. with a worker back, the next DAG run aborts the dead run's checkpoint (JOB_FAILOVER), redoes the
   epoch on the cluster, and the committed output equals the fault-free in-process run's.

(Two spark-submits, not three: a fault-free cluster epoch before the kill would add a minute and
prove nothing step 2 does not -- its output is compared with the in-process run's.)

The executors get the store's credentials only as ``spark.executorEnv.*`` conf (no files), and the
credentials appear in no log (Airflow's, spark-submit's, the Spark daemons', the executors') and not
in the Airflow metadata DB (XComs, rendered fields). Skipped only when Java is missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.sinks import read_committed
from state_store.core import JobLayout, checkpoint_history
from state_store.testing.seaweedfs import SeaweedFSServer
from tests.integration.airflow.support import AIRFLOW_BIN, ROOT, airflow_environment, dags_test, logical_date
from tests.integration.cluster.standalone import FAST_JVM, StandaloneCluster, java_missing_reason
from tests.unit.runtime.support import SINK, STEP_MS, committed_rows, cycle, new_clock, small_job

pytestmark = pytest.mark.integration
DAG = "epochal_clickstream"
JOB = "tests.integration.cluster.pausing:pausing_job"
BUCKET = "epochal-cluster"
SPARK_CONF = [
    f"spark.executorEnv.PYTHONPATH={ROOT}",  # the test's job module, importable on the executors
    "spark.executor.memory=512m",
    "spark.cores.max=1",  # one Python worker: its imports are paid once, not twice in parallel
    "spark.ui.enabled=false",
    "spark.task.maxFailures=1",  # a lost executor fails the epoch: recovery is the next DAG run's
    f"spark.driver.extraJavaOptions={FAST_JVM}",
    f"spark.executor.extraJavaOptions={FAST_JVM}",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    reason = java_missing_reason()
    if reason:
        print(f"SKIPPED Spark standalone cluster test: {reason}")
        pytest.skip(reason)
    started = StandaloneCluster(tmp_path_factory.mktemp("spark"), worker_cores=1, worker_memory="1g").start()
    try:
        yield started
    finally:
        started.stop()


def reference_rows(epochs: int) -> list[tuple[object, ...]]:
    """What the in-process run commits after ``epochs`` fault-free epochs."""
    uri = Path(tempfile.mkdtemp()).as_uri()
    job, clock = small_job(), new_clock()
    for _ in range(epochs):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    return committed_rows(uri, job)


def test_epochs_via_spark_submit_on_a_standalone_cluster_survive_a_worker_kill(
    cluster: StandaloneCluster, seaweedfs: SeaweedFSServer, tmp_path: Path
) -> None:
    store = seaweedfs.make_store(BUCKET, "jobs")
    aws = {
        "conn_type": "aws",
        "login": seaweedfs.access_key,
        "password": seaweedfs.secret_key,
        "extra": {"endpoint_url": seaweedfs.endpoint_url, "region_name": seaweedfs.region},
    }
    spark = {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cluster.port}
    env = airflow_environment(
        tmp_path / "airflow",
        EPOCHAL_JOBS=JOB,
        EPOCHAL_EXECUTOR="spark-submit",
        EPOCHAL_SPARK_CONN_ID="epochal_spark",
        EPOCHAL_SPARK_CONF=",".join(SPARK_CONF),
        EPOCHAL_STORE_URI=f"s3://{BUCKET}/jobs",
        EPOCHAL_STORE_CONN_ID="epochal_s3",
        AIRFLOW_CONN_EPOCHAL_S3=json.dumps(aws),
        AIRFLOW_CONN_EPOCHAL_SPARK=json.dumps(spark),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        env.pop(key, None)  # the only way to the keys is the Airflow connection

    def rows() -> list[tuple[object, ...]]:
        table = read_committed(store, "clickstream", SINK)
        return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)

    def statuses() -> dict[int, str]:
        return {r.checkpoint_id: r.status for r in checkpoint_history(store, "clickstream")}

    logs: list[str] = []
    # 1. kill the worker JVM and its executor while the epoch's tasks run
    worker = cluster.workers[0]
    conf = ",".join([*SPARK_CONF, "spark.executorEnv.EPOCHAL_TEST_PAUSE_S=120"])
    killed_run = subprocess.Popen(
        [AIRFLOW_BIN, "dags", "test", DAG, logical_date(1)],
        env={**env, "EPOCHAL_SPARK_CONF": conf},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not cluster.python_task_pids(worker):
            assert killed_run.poll() is None, f"the run ended before its tasks ran: {killed_run.stdout}"
            assert time.monotonic() < deadline, "the epoch's tasks never started on the worker"
            time.sleep(0.5)
        assert store.list(JobLayout("clickstream").attempts_prefix(1)), "no attempt: not mid-epoch"
        assert cluster.kill_worker(worker), "no executor JVM to kill"
        killed_at = time.monotonic()
        output, _ = killed_run.communicate(timeout=180)
        failed_after_s = time.monotonic() - killed_at
    finally:
        if killed_run.poll() is None:
            os.killpg(killed_run.pid, signal.SIGKILL)
            killed_run.wait()
    logs.append(output)
    assert killed_run.returncode != 0, output[-5000:]
    assert f"--master {cluster.master_url}" in output  # the provider's (masked) spark-submit command
    # the epoch failed fast, not hung: the tasks were paused for 120 s, so a run that waited for them or
    # for new resources could not have ended this soon. Two causes race and both are the fast failure
    # we ask for: the driver's executor-loss watchdog, or Spark's own abort of the lost task
    # (spark.task.maxFailures=1) reaching the driver first.
    assert failed_after_s < 100, f"the run took {failed_after_s:.0f} s after the kill: {output[-5000:]}"
    fast_failure = ("lost mid-epoch", "ExecutorLostFailure", "Lost executor", "aborted due to stage failure")
    assert any(marker in output for marker in fast_failure), output[-5000:]
    assert statuses() == {1: "in_progress"}

    # 2. a worker is back; the next DAG run aborts the dead run's checkpoint and redoes the epoch
    cluster.start_worker()
    recovered = dags_test(env, DAG, 1)
    logs.append(recovered.stdout + recovered.stderr)
    assert recovered.returncode == 0, logs[-1][-5000:]
    assert "epochal run_epoch: job=" in logs[-1]
    history = {r.checkpoint_id: r for r in checkpoint_history(store, "clickstream")}
    assert history[1].status == "aborted" and "JOB_FAILOVER" in history[1].reason
    assert history[2].status == "completed"
    # the cluster commits exactly what the fault-free in-process run commits
    assert rows() and rows() == reference_rows(1)

    # credentials: in no log, not in the metadata DB; executors had them only through Spark conf
    everything = "\n".join([*logs, cluster.logs()])
    for file in Path(env["AIRFLOW_HOME"]).rglob("*.log"):
        everything += file.read_text(errors="replace")
    assert seaweedfs.secret_key not in everything and seaweedfs.access_key not in everything
    assert seaweedfs.secret_key.encode() not in (Path(env["AIRFLOW_HOME"]) / "airflow.db").read_bytes()
