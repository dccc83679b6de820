"""``deploy/ui.py`` (``make ui``): which home it picks, the port check, the login, the environment, and
that stopping leaves no process of the components' sessions alive (with fake components that
ignore SIGTERM and escape into a process group of their own). The real start against Airflow is
the newcomer pass (tests/integration/test_newcomer.py)."""

from __future__ import annotations

import importlib.util
import os
import socket
import stat
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_ui", ROOT / "deploy" / "ui.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["deploy_ui"] = module
    spec.loader.exec_module(module)
    return module


ui = _load()


def test_the_demo_home_and_store_are_used_when_make_demo_left_them(tmp_path: Path) -> None:
    (tmp_path / ".demo" / "airflow").mkdir(parents=True)
    (tmp_path / ".demo" / "store").mkdir()
    setup = ui.choose_setup(tmp_path, {})
    assert (setup.home, setup.store, setup.jobs, setup.from_demo) == (
        tmp_path / ".demo" / "airflow",
        tmp_path / ".demo" / "store",
        "deploy.demo:demo_job",
        True,
    )


def test_a_fresh_ui_home_without_the_demo_and_epochal_jobs_from_the_environment_wins(tmp_path: Path) -> None:
    (tmp_path / ".demo" / "airflow").mkdir(parents=True)  # half a demo (no store) is not the demo
    setup = ui.choose_setup(tmp_path, {"EPOCHAL_JOBS": "keyed_counts"})
    assert (setup.home, setup.store, setup.jobs, setup.from_demo) == (
        tmp_path / ".ui" / "airflow",
        tmp_path / ".ui" / "store",
        "keyed_counts",
        False,
    )


def test_a_taken_port_is_one_line_naming_it_and_the_remedy() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ui.UiError) as caught:
            ui.check_port(port)
    message = caught.value.message
    assert f"port {port}" in message and f"make ui PORT={port + 1}" in message and "\n" not in message
    assert caught.value.code == 2
    ui.check_port(port)  # free again


def test_a_port_out_of_range_is_refused() -> None:
    with pytest.raises(ui.UiError, match="PORT=70000 is not a TCP port"):
        ui.check_port(70000)


def test_main_exits_2_with_the_message_when_the_port_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert ui.main(["--port", str(busy.getsockname()[1])]) == 2
    assert "is taken" in capsys.readouterr().err


def test_the_login_is_created_once_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "home" / "passwords.json"
    first = ui.ensure_password(path)
    assert len(first) >= 12 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ui.ensure_password(path) == first
    path.write_text("not json")
    assert ui.ensure_password(path) not in ("", first)


def test_every_component_gets_the_project_the_store_and_the_execution_api_on_its_port(tmp_path: Path) -> None:
    setup = ui.Setup(tmp_path / "airflow", tmp_path / "store", "clickstream", True)
    env = ui.airflow_env(setup, 8123, {"PATH": "/bin"})
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:8123/execution/"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(ROOT / "plugins")
    assert env["EPOCHAL_STORE_URI"] == (tmp_path / "store").as_uri() and env["EPOCHAL_JOBS"] == "clickstream"
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert ui.airflow_env(setup, 1, {"EPOCHAL_STORE_URI": "s3://b/p"})["EPOCHAL_STORE_URI"] == "s3://b/p"
    assert ui.component_command("airflow", "api-server", 8123)[-4:] == ["--port", "8123", "--workers", "1"]


STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
# a grandchild in a process group of its own (as a task runner may make), also deaf to SIGTERM
subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; os.setpgid(0, 0); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the session sweep reads /proc (Linux)")
def test_stop_leaves_no_process_of_any_component_session_even_those_that_ignore_sigterm(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "airflow"
    fake.write_text(f"#!{sys.executable}\n{STUBBORN}")
    fake.chmod(0o755)
    supervisor = ui.Supervisor(dict(os.environ), tmp_path / "logs", 1, airflow=str(fake), grace_s=1.0)
    supervisor.start()
    sids = {p.pid for p in supervisor.procs.values()}
    deadline = time.monotonic() + 20
    while len(ui.session_members(sids)) < 2 * len(ui.COMPONENTS) and time.monotonic() < deadline:
        time.sleep(0.1)
    members = ui.session_members(sids)
    assert len(members) == 2 * len(ui.COMPONENTS), members
    supervisor.stop()
    assert ui.session_members(sids) == set()
    for pid in members:  # gone, or a zombie its (killed) parent's reaper has not collected yet
        stat_file = Path(f"/proc/{pid}/stat")
        assert not stat_file.exists() or stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"
