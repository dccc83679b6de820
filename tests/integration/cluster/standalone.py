"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark distribution: one master and
workers started with ``spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`` on free
ports, bounded memory and cores, each in its own process group (killed as a whole on stop).

Readiness is read from the master's JSON status page (``/json/``): a worker counts once the master
lists it ``ALIVE``. :meth:`StandaloneCluster.kill_worker` SIGKILLs a worker JVM and the executor
JVMs it launched (their Python workers die with them) -- a machine loss, not a clean shutdown.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

# Short-lived test JVMs: the C1 compiler only and the serial collector start faster and burn less CPU
# (this machine's two cores are shared) than the server defaults.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def java_missing_reason() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is missing (no java on PATH, no JAVA_HOME): the Spark standalone test needs Java 17"
    return None


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    port: int
    log: Path


class StandaloneCluster:
    def __init__(self, base: Path, *, worker_cores: int = 2, worker_memory: str = "1g") -> None:
        self.base = base
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.port = free_port()
        self.ui_port = free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[Worker] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
            "SPARK_LOG_DIR": str(self.base / "logs"),
            "SPARK_WORKER_DIR": str(self.base / "work"),
            "SPARK_NO_DAEMONIZE": "1",
            # no REST submission server: its fixed port 6066 would clash between concurrent test runs
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.base / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process, log

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return dict(json.load(response))

    def alive_worker_ports(self) -> set[int]:
        try:
            workers = self.status().get("workers", [])
        except (OSError, ValueError):
            return set()
        return {int(w["port"]) for w in workers if w.get("state") == "ALIVE"}

    def _wait(
        self, what: str, ready: Any, process: subprocess.Popen[bytes], log: Path, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}")
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what} not ready after {timeout_s}s: {log.read_text()[-2000:]}")

    def start(self) -> StandaloneCluster:
        """Master and first worker start together (two JVM start-ups overlap; the worker retries
        its registration until the master is up); returns once the master lists the worker ALIVE."""
        self.master, log = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        try:
            worker = self._spawn_worker()
            self._wait("Spark master", self._status_ok, self.master, log, 120)
            self._wait_worker(worker)
        except BaseException:
            self.stop()
            raise
        return self

    def _status_ok(self) -> bool:
        try:
            return self.status().get("status") == "ALIVE"
        except (OSError, ValueError):
            return False

    def _spawn_worker(self) -> Worker:
        port = free_port()
        process, log = self._spawn(
            f"worker-{port}",
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
            "--cores", str(self.worker_cores), "--memory", self.worker_memory,
            "--work-dir", str(self.base / "work"),
        )  # fmt: skip
        worker = Worker(process, port, log)
        self.workers.append(worker)
        return worker

    def _wait_worker(self, worker: Worker) -> None:
        ready = lambda: worker.port in self.alive_worker_ports()  # noqa: E731
        self._wait(f"Spark worker {worker.port}", ready, worker.process, worker.log, 120)

    def start_worker(self) -> Worker:
        """Another worker (e.g. a replacement after a kill); returns once it is registered."""
        worker = self._spawn_worker()
        self._wait_worker(worker)
        return worker

    def executor_pids(self, worker: Worker) -> list[int]:
        pids = []
        try:
            children = psutil.Process(worker.process.pid).children(recursive=True)
        except psutil.Error:
            return []
        for child in children:
            try:
                if "CoarseGrainedExecutorBackend" in " ".join(child.cmdline()):
                    pids.append(child.pid)
            except psutil.Error:  # gone or a zombie already
                continue
        return pids

    def python_task_pids(self, worker: Worker) -> list[int]:
        """Python workers of the worker's executors: present while PySpark tasks run."""
        pids = []
        for executor in self.executor_pids(worker):
            try:
                children = psutil.Process(executor).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    if "pyspark" in " ".join(child.cmdline()):
                        pids.append(child.pid)
                except psutil.Error:
                    continue
        return pids

    def kill_worker(self, worker: Worker) -> list[int]:
        """SIGKILL the worker's executors, then the worker JVM; returns the executor pids killed."""
        executors = self.executor_pids(worker)
        for pid in executors:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)  # the worker and anything left in its group
        except ProcessLookupError:
            pass
        worker.process.wait(timeout=30)
        self.workers.remove(worker)
        return executors

    def stop(self) -> None:
        for worker in list(self.workers):
            self.kill_worker(worker)
        if self.master is not None:
            try:
                os.killpg(self.master.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.master.wait(timeout=30)
            self.master = None

    def logs(self) -> str:
        """Every daemon log and every executor's stdout/stderr (for leak checks and failure messages)."""
        files = [*self.base.glob("*.log"), *(self.base / "work").rglob("std*")]
        return "\n".join(p.read_text(errors="replace") for p in sorted(files) if p.is_file())
