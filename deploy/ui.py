"""``make ui``: the Airflow UI on this machine, with the project's DAGs, plugin and store, in one command.

1. choose the setting (:func:`choose_setup`): the demo's Airflow home ``.demo/airflow`` with its store
   ``.demo/store`` and ``EPOCHAL_JOBS=deploy.demo:demo_job`` (the demo's job on its own start time, so a run
   triggered in the UI continues the demo's clock) when ``make demo`` left them, else a fresh home under
   ``.ui/`` (its own SQLite database and store); ``EPOCHAL_*`` variables already set win;
2. refuse a port another process listens on (one line naming the port and ``make ui PORT=...``);
3. one login for the simple auth manager: user ``admin``, a random password kept in
   ``<home>/epochal_ui_passwords.json`` (the same login on the next start);
4. ``airflow db migrate``, then Airflow 3's four components -- ``api-server`` (on 127.0.0.1:PORT),
   ``scheduler`` (LocalExecutor), ``dag-processor`` and ``triggerer`` -- each in its own session (a
   process group of its own; Ctrl-C in the terminal reaches only this supervisor), output in
   ``<home>/logs/ui/<component>.log``;
5. when the API server answers, print the URL, the login and where the Checkpoints view is;
6. on Ctrl-C, SIGTERM or SIGHUP, or when a component dies: SIGTERM to every component's process
   group, SIGKILL to what is left after :data:`GRACE_S`, then every process still in one of their
   sessions (a task process that made a group of its own): nothing started here outlives it.

One ``make ui`` per Airflow home: a second one (another terminal, another port) is refused with one
line naming the first one's pid (:func:`hold_home`), so two schedulers never share one SQLite file.
The database is always ``<home>/airflow.db`` (an ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` in the shell or
a stale ``airflow.cfg`` of a moved checkout is never used).

Invariant: every process this starts (``airflow db migrate`` included) is in a session whose id is the
pid of a process it started, registered with signals held (a Ctrl-C cannot orphan one), and
:meth:`Supervisor.stop` returns only when no process of those sessions is alive.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
USER = "admin"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
GRACE_S = 20.0
READY_TIMEOUT_S = 240.0
AIRFLOW = str(Path(sys.executable).parent / "airflow")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SIMPLE_AUTH = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


class UiError(SystemExit):
    """A one-line reason ``make ui`` cannot start (exit code 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Setup:
    """Where Airflow runs: its home, the Epochal store and jobs, and whether it is the demo's."""

    home: Path
    store: Path
    jobs: str
    from_demo: bool


DEMO_JOB = "deploy.demo:demo_job"
"""The job ``make demo`` ran (``deploy/demo.py``): clickstream on the demo's start (``.demo/start_ms``)."""


def choose_setup(root: Path, env: Mapping[str, str]) -> Setup:
    """The demo's home and store when both exist (``make demo`` ran), else a fresh ``.ui/``."""
    demo = root / ".demo"
    if (demo / "airflow").is_dir() and (demo / "store").is_dir():
        return Setup(demo / "airflow", demo / "store", env.get("EPOCHAL_JOBS", DEMO_JOB), True)
    return Setup(
        root / ".ui" / "airflow", root / ".ui" / "store", env.get("EPOCHAL_JOBS", "clickstream"), False
    )


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """UiError unless ``port`` is valid and free on ``host``."""
    if not 1 <= port <= 65535:
        raise UiError(f"make ui: PORT={port} is not a TCP port: use 1..65535, e.g. `make ui PORT=8081`")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise UiError(
                    f"make ui: port {port} on {host} cannot be used ({exc.strerror}): pick another port, "
                    f"e.g. `make ui PORT={8080 if port < 1024 else port + 1}`"
                ) from None
            raise UiError(
                f"make ui: port {port} on {host} is taken (another process listens on it): stop that "
                f"process or pick another port, e.g. `make ui PORT={port + 1}`"
            ) from None


def hold_home(home: Path, port: int) -> IO[str]:
    """An exclusive lock on ``<home>/epochal_ui.lock`` for as long as the returned file is open
    (the kernel drops it when this process dies, however it dies); UiError naming the holder's pid
    when another ``make ui`` runs on the same home."""
    home.mkdir(parents=True, exist_ok=True)
    lock = (home / "epochal_ui.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown pid"
        lock.close()
        raise UiError(
            f"make ui: another `make ui` already runs on {home} ({holder}): use that one, or stop it "
            "(Ctrl-C in its terminal) before starting another"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}, port {port}")
    lock.flush()
    return lock


def ensure_password(path: Path, user: str = USER) -> str:
    """The password of ``user`` in the simple auth manager's passwords file, created if missing."""
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        known = {}
    if not isinstance(known, dict) or not isinstance(known.get(user), str) or not known[user]:
        known = {**(known if isinstance(known, dict) else {}), user: secrets.token_urlsafe(12)}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known))
        path.chmod(0o600)
    return str(known[user])


def airflow_env(
    setup: Setup, port: int, base: Mapping[str, str], python: str = sys.executable
) -> dict[str, str]:
    """The environment of every Airflow component: the project's DAGs and plugin, the Epochal
    settings, the simple auth manager with one user, the execution API on this port."""
    env = {
        **base,
        "AIRFLOW_HOME": str(setup.home),
        "AIRFLOW_CONFIG": str(setup.home / "airflow.cfg"),
        # this home's own database, whatever the shell or an airflow.cfg of a moved checkout says
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{setup.home / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(setup.home / "epochal_ui_passwords.json"),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        "PYSPARK_PYTHON": python,
        "EPOCHAL_STORE_URI": base.get("EPOCHAL_STORE_URI", setup.store.as_uri()),
        "EPOCHAL_JOBS": setup.jobs,
    }
    if setup.from_demo:
        env.setdefault("EPOCHAL_RESTART", "none")  # the demo's DAG shape, so no new DAG version
    return env


def component_command(airflow: str, name: str, port: int) -> list[str]:
    if name == "api-server":
        return [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    return [airflow, name]


def session_members(sids: set[int]) -> set[int]:
    """Pids of live processes whose session id is in ``sids`` (Linux /proc; empty elsewhere)."""
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp session ...; a zombie is not alive
        if fields[0] != "Z" and int(fields[3]) in sids:
            found.add(int(entry.name))
    return found


@dataclass
class Supervisor:
    """Starts the components, each in a new session, and stops every process of those sessions."""

    env: dict[str, str]
    logs: Path
    port: int
    airflow: str = field(default_factory=lambda: AIRFLOW)
    grace_s: float = field(default_factory=lambda: GRACE_S)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """One-off commands (``airflow db migrate``), stopped and swept like the components."""

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        """Start ``args`` in a session of its own; the caller registers it with signals held."""
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{log}.log").open("ab") as out:
            return subprocess.Popen(
                args,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def migrate(self) -> None:
        """``airflow db migrate`` (RuntimeError with its log's tail when it fails)."""
        with _signals_held():
            proc = self._spawn([self.airflow, "db", "migrate"], "db-migrate")
            self.helpers.append(proc)
        if proc.wait() != 0:
            raise RuntimeError(
                f"`airflow db migrate` failed (exit {proc.returncode}): {self.tail('db-migrate')}"
            )

    def start(self) -> None:
        for name in COMPONENTS:
            with _signals_held():
                self.procs[name] = self._spawn(component_command(self.airflow, name, self.port), name)

    def dead(self) -> str | None:
        """The name of a component that exited, or None."""
        return next((n for n, p in self.procs.items() if p.poll() is not None), None)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        url = f"http://127.0.0.1:{self.port}/api/v2/monitor/health"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (name := self.dead()) is not None:
                raise RuntimeError(f"airflow {name} exited at start: {self.tail(name)}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(
            f"the API server did not answer within {timeout_s:.0f} s: {self.tail('api-server')}"
        )

    def tail(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        text = path.read_text(errors="replace")[-1500:] if path.exists() else ""
        return f"see {path}\n{text}"

    def stop(self) -> None:
        """SIGTERM every component's group, SIGKILL what is left after ``grace_s``, then sweep sessions."""
        started = [*self.procs.values(), *self.helpers]
        sids = {p.pid for p in started}
        for p in started:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and (
            any(p.poll() is None for p in started) or session_members(sids)
        ):
            time.sleep(0.2)
        for p in started:
            _signal_group(p.pid, signal.SIGKILL)
        for _ in range(50):
            left = session_members(sids)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for p in started:
            p.wait(timeout=10)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block ends (a process is started *and* registered)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="the API server's port (make ui PORT=8081)")
    args = parser.parse_args(argv)
    try:
        check_port(args.port)
    except UiError as exc:
        print(exc.message, file=sys.stderr)
        return 2
    setup = choose_setup(ROOT, os.environ)
    try:
        lock = hold_home(setup.home, args.port)
    except UiError as exc:
        print(exc.message, file=sys.stderr)
        return 2
    setup.store.mkdir(parents=True, exist_ok=True)
    env = airflow_env(setup, args.port, os.environ)
    password = ensure_password(Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]))
    source = (
        "the demo's (make demo)"
        if setup.from_demo
        else "a fresh one (run `make demo` for a job with history)"
    )
    print(
        f"make ui: Airflow home {setup.home} -- {source}; store {env['EPOCHAL_STORE_URI']}; jobs {setup.jobs}"
    )
    supervisor = Supervisor(env, setup.home / "logs" / "ui", args.port)
    for sig in SIGNALS:
        signal.signal(sig, _raise_stop)
    code = 0
    try:
        supervisor.migrate()
        supervisor.start()
        supervisor.wait_ready()
        url = f"http://127.0.0.1:{args.port}"
        print(
            f"\nAirflow is up: {url}\n  login:       {USER} / {password}\n"
            f"  Checkpoints: {url}/plugin/epochal-checkpoints (Browse -> Checkpoints)\n"
            f"  logs:        {supervisor.logs}/\nPress Ctrl-C to stop every Airflow process started here.",
            flush=True,
        )
        while (name := supervisor.dead()) is None:
            time.sleep(1)
        print(
            f"make ui: airflow {name} exited; stopping the others. {supervisor.tail(name)}", file=sys.stderr
        )
        code = 1
    except _Stop as stop:
        print(f"\nmake ui: {stop} received, stopping Airflow ...", flush=True)
    except RuntimeError as exc:
        print(f"make ui: {exc}", file=sys.stderr)
        code = 1
    finally:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        supervisor.stop()
        lock.close()
    print("make ui: stopped; nothing is left running.", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
