"""A real PostgreSQL server on 127.0.0.1 for tests and drills (the Postgres sink's tests).

``PostgresServer`` runs ``initdb`` into a temp dir and ``postgres`` on a free loopback port, with
its unix socket in the same temp dir::

    with PostgresServer() as pg:
        dsn = pg.dsn()                      # host=127.0.0.1 port=... user=postgres dbname=epochal
        ...

Guarantees and invariants:

* The binaries come from ``$EPOCHAL_PG_BIN`` (a folder holding ``initdb`` and ``postgres``), else
  the newest ``/usr/lib/postgresql/<version>/bin`` (Debian's layout; ``make postgres-deps``
  installs it), else ``pg_config --bindir``. Wrappers on PATH are not used: Debian's
  ``pg_wrapper`` scripts refuse to run without a cluster configuration.
* PostgreSQL refuses to run as root: when this process is root, ``initdb`` and ``postgres`` run
  as the unprivileged ``postgres`` user (created by Debian's ``postgresql`` package), and the temp
  dir is owned by that user. Without such a user, :class:`PostgresUnavailable` says what to do.
* Authentication is ``trust`` and the server listens on 127.0.0.1 only (a test server: never
  expose it). Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``): a crash
  of the *client* is what the tests simulate, never one of the server.
* ``start()`` returns once ``SELECT 1`` succeeds and the database ``dbname`` exists; otherwise it
  stops the server and raises RuntimeError with the tail of the server log.
* ``stop()`` asks for a fast shutdown (SIGINT), SIGKILLs the process group after ``grace_s``, then
  removes the temp dir. A server object left running is killed when it is garbage-collected or the
  interpreter exits.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg import sql

PG_BIN_ENV = "EPOCHAL_PG_BIN"
SERVER_USER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries, or no unprivileged user to run them as."""


def find_pg_bin() -> Path:
    """The folder holding ``initdb`` and ``postgres`` (see the module docstring)."""
    explicit = os.environ.get(PG_BIN_ENV)
    if explicit:
        folder = Path(explicit)
        if not _has_server(folder):
            raise PostgresUnavailable(
                f"{PG_BIN_ENV}={explicit} holds no executable initdb and postgres: fix or unset it"
            )
        return folder
    versions = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if _has_server(Path(p))]
    if versions:
        return max(versions, key=lambda p: _version_key(p.parent.name))
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        folder = Path(out.stdout.strip())
        if out.returncode == 0 and _has_server(folder):
            return folder
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin with initdb and postgres): "
        f"run `make postgres-deps` (apt-get install postgresql) or set {PG_BIN_ENV}=/path/to/bin"
    )


def _has_server(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in ("initdb", "postgres"))


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class PostgresServer:
    """One ``postgres`` on loopback with a fresh cluster; see the module docstring."""

    def __init__(
        self, *, dbname: str = "epochal", bin_dir: Path | None = None, startup_timeout_s: float = 30.0
    ) -> None:
        self.bin_dir = bin_dir or find_pg_bin()
        self.dbname = dbname
        self.startup_timeout_s = startup_timeout_s
        self.port = _free_port()
        self._run_as = _server_user()
        self._tmp: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[int], PostgresServer] | None = None

    # -- addresses -----------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def tmp_dir(self) -> Path:
        """The temp dir: ``data/`` (the cluster), ``sock/`` (unix socket) and ``postgres.log``."""
        if self._tmp is None:
            raise RuntimeError("PostgreSQL has no temp dir: call start() first")
        return self._tmp

    @property
    def log_path(self) -> Path:
        return self.tmp_dir / "postgres.log"

    def dsn(self, dbname: str | None = None) -> str:
        """A libpq conninfo string for ``dbname`` (default: the server's database) over TCP."""
        return f"host={self.host} port={self.port} user={SERVER_USER} dbname={dbname or self.dbname}"

    def connect(self, dbname: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new connection (autocommit unless ``autocommit=False`` is given)."""
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn(dbname), connect_timeout=5, **kwargs)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"PostgresServer({self.host}:{self.port}, {state})"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Self:
        """Create the cluster (first start only), start the server and wait until it serves."""
        if self.running:
            return self
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="epochal-pg-"))
            (self._tmp / "sock").mkdir()
            self._chown_tmp()
            self._initdb()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._command(),
                cwd=self._tmp,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=_server_env(),
                **self._user_kwargs(),
            )
        self._finalizer = weakref.finalize(self, _kill_group, self._proc.pid)
        try:
            self._wait_ready()
            self._create_database()
        except BaseException:
            self.stop(grace_s=0)
            raise
        return self

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Fast shutdown (SIGINT), SIGKILL after ``grace_s``; the temp dir is removed."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
            if self._finalizer is not None:
                self._finalizer.detach()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------
    def _user_kwargs(self) -> dict[str, Any]:
        if self._run_as is None:
            return {}
        return {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}

    def _chown_tmp(self) -> None:
        if self._run_as is None:
            return
        for path in (self.tmp_dir, self.tmp_dir / "sock"):
            os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)

    def _initdb(self) -> None:
        command = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.tmp_dir / "data"),
            "-U",
            SERVER_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        done = subprocess.run(
            command,
            cwd=self.tmp_dir,
            capture_output=True,
            text=True,
            check=False,
            env=_server_env(),
            **self._user_kwargs(),
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise RuntimeError(f"initdb failed with code {done.returncode}:\n{tail}")

    def _command(self) -> list[str]:
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.tmp_dir / "sock"),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "32MB",
            "logging_collector": "off",
        }
        command = [str(self.bin_dir / "postgres"), "-D", str(self.tmp_dir / "data")]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        return command

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise RuntimeError(f"PostgreSQL exited with code {code} during startup{self._log_tail()}")
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                    return
            except psycopg.OperationalError as exc:
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            time.sleep(0.1)
        raise RuntimeError(
            f"PostgreSQL at {self.host}:{self.port} not ready after {self.startup_timeout_s:.0f} s "
            f"(last attempt: {last}){self._log_tail()}"
        )

    def _create_database(self) -> None:
        with self.connect("postgres") as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except (OSError, RuntimeError):
            return ""
        return "; last lines of postgres.log:\n" + "\n".join(tail)


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None (this process's user) unless this process is root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresUnavailable(
            f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to run it as: "
            f"run `make postgres-deps` (Debian's postgresql package creates it) or run the tests "
            "as a non-root user"
        ) from None


def _server_env() -> dict[str, str]:
    keep = ("PATH", "TZ")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update({"LC_ALL": "C", "LANG": "C"})
    return env
