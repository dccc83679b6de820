"""``make ui`` misused as a newcomer or an operator would: started twice, interrupted during ``airflow db
migrate``, a component killed, SIGHUP, a privileged port, a database setting in the shell. Driven through
``deploy/ui.py``'s ``main`` in a child process with a fake ``airflow`` (an API server that answers the
health check, components that sleep and ignore SIGTERM, a slow migrate with a child of its own), so each
case takes seconds; the real Airflow start is the newcomer pass."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

FAKE_AIRFLOW = r"""
import http.server, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.environ["FAKE_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\n")
if sys.argv[1:3] == ["db", "migrate"]:
    # a child of the migrate's own (its argv names this test's tmp dir, so cleanup can tell it is ours)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ["FAKE_PIDS"]])
    with open(os.environ["FAKE_PIDS"], "a") as f:
        f.write(f"{child.pid}\n")
    time.sleep(float(os.environ.get("FAKE_MIGRATE_S", "0")))
    sys.exit(0)
if sys.argv[1] == "api-server":
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
time.sleep(600)
"""

DRIVER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("deploy_ui", {ui!r})
ui = importlib.util.module_from_spec(spec); sys.modules["deploy_ui"] = ui; spec.loader.exec_module(ui)
ui.AIRFLOW, ui.ROOT, ui.GRACE_S = {fake!r}, __import__("pathlib").Path({root!r}), 1.0
sys.exit(ui.main(["--port", "{port}"]))
"""


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_ui_review22", ROOT / "deploy" / "ui.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_ui_review22"] = module
    spec.loader.exec_module(module)
    return module


ui = _load()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """One ``make ui`` (``main``) in a child process of its own group, on a fake Airflow under tmp."""

    def __init__(self, tmp: Path, *, migrate_s: float = 0.0, port: int | None = None) -> None:
        self.tmp, self.port = tmp, port or free_port()
        fake = tmp / "airflow"
        fake.write_text(f"#!{sys.executable}\n{FAKE_AIRFLOW}")
        fake.chmod(0o755)
        self.pids = tmp / "pids"
        driver = DRIVER.format(
            ui=str(ROOT / "deploy" / "ui.py"), fake=str(fake), root=str(tmp), port=self.port
        )
        env = {**os.environ, "FAKE_PIDS": str(self.pids), "FAKE_MIGRATE_S": str(migrate_s)}
        env.pop("EPOCHAL_STORE_URI", None)
        self.out, self.err = (tmp / f"out-{self.port}").open("w+"), (tmp / f"err-{self.port}").open("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", driver], env=env, stdout=self.out, stderr=self.err, start_new_session=True
        )

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout():
                return
            assert self.proc.poll() is None, self.stdout() + self.stderr()
            time.sleep(0.1)
        pytest.fail(f"no {text!r} in {timeout} s: {self.stdout()}{self.stderr()}")

    def started(self, n: int, timeout: float = 30) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [int(p) for p in self.pids.read_text().split()] if self.pids.exists() else []
            if len(pids) >= n:
                return pids
            time.sleep(0.1)
        pytest.fail(f"fewer than {n} fake airflow processes started: {self.stdout()}{self.stderr()}")

    def stdout(self) -> str:
        self.out.seek(0)
        return self.out.read()

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()

    def finish(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def _no_fake_outlives_its_test(tmp_path: Path):  # type: ignore[no-untyped-def]
    yield
    pids_file = tmp_path / "pids"
    if pids_file.exists():  # a failed test must not leave its fakes (they ignore SIGTERM)
        pids = {int(p) for p in pids_file.read_text().split()}
        for pid in ui.session_members(pids) | pids:
            try:  # only ours: a pid of this test's tmp dir (never a reused pid of someone else)
                if str(tmp_path) not in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    continue
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def left_over(tmp: Path) -> list[int]:
    """Every fake airflow process and the migrate's child still alive (their sessions: the fakes' pids)."""
    pids = {int(p) for p in (tmp / "pids").read_text().split()}
    return sorted(p for p in ui.session_members(pids) | pids if alive(p))


def test_a_second_make_ui_on_the_same_home_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = Run(tmp_path, migrate_s=600)  # still migrating: its port is not bound yet
    first.started(1)
    second = Run(tmp_path)
    assert second.finish() == 2
    line = second.stderr().strip()
    assert f"another `make ui` already runs on {tmp_path / '.ui' / 'airflow'} (pid {first.proc.pid}" in line
    assert "\n" not in line
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == 0
    assert left_over(tmp_path) == []


def test_sigterm_during_db_migrate_stops_the_migrate_and_its_children(tmp_path: Path) -> None:
    run = Run(tmp_path, migrate_s=600)
    run.started(2)  # the migrate and its child are running
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 0
    assert "SIGTERM received" in run.stdout() and "nothing is left running" in run.stdout()
    assert left_over(tmp_path) == []


def test_a_killed_component_stops_all_of_them_and_says_which(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.wait_for("Airflow is up")
    pids = run.started(2 + len(ui.COMPONENTS))
    os.kill(pids[-1], signal.SIGKILL)  # the last started component
    assert run.finish() == 1
    assert "exited; stopping the others" in run.stderr()
    assert left_over(tmp_path) == []


def test_sighup_stops_everything(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.wait_for("Airflow is up")
    run.proc.send_signal(signal.SIGHUP)
    assert run.finish() == 0
    assert "SIGHUP received" in run.stdout()
    assert left_over(tmp_path) == []


def test_a_port_that_cannot_be_bound_for_another_reason_is_not_called_taken() -> None:
    with pytest.raises(ui.UiError) as caught:
        ui.check_port(8123, host="192.0.2.1")  # TEST-NET-1: not an address of this machine
    assert "port 8123 on 192.0.2.1 cannot be used (Cannot assign requested address)" in caught.value.message
    assert "is taken" not in caught.value.message and "make ui PORT=8124" in caught.value.message


def test_the_shells_database_setting_and_a_stale_cfg_never_reach_make_uis_airflow(tmp_path: Path) -> None:
    setup = ui.Setup(tmp_path / "airflow", tmp_path / "store", "clickstream", True)
    env = ui.airflow_env(
        setup,
        8123,
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://prod/airflow",
            "AIRFLOW_CONFIG": "/etc/airflow/airflow.cfg",
        },
    )
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path / 'airflow' / 'airflow.db'}"
    assert env["AIRFLOW_CONFIG"] == str(tmp_path / "airflow" / "airflow.cfg")
