"""ObjectStore on a local directory (the embedded default), POSIX only.

How each guarantee of the port is met:

* atomic visibility -- every write goes to a temp file in ``<root>/.epochal-internal/tmp``,
  is fsynced, then moved into place with ``rename`` (replace) or ``link`` (create-only), and the
  parent directory is fsynced; readers never see a partial file.
* create-only -- ``os.link(tmp, final)`` fails with EEXIST if the key exists: the kernel picks one
  winner among concurrent creators (threads or processes).
* compare-and-swap -- ``put`` and ``put_if_match`` hold an exclusive ``flock`` on one of 64 lock
  files (striped by key hash) while they compare the version and rename.
* versions -- ``<inode>-<mtime_ns>-<size>`` of the file: every write creates a new inode, so the
  version changes on every write.
* disk full -- ENOSPC/EDQUOT removes the temp file and raises StorageFullError; the previous
  content is untouched.
* verified uploads (``put_verified``, for data files: ``state_store.core.checksums.put_checked``) --
  after the temp file is written and fsynced it is read back and checksummed with the algorithm of
  the writer's checksum, *before* the create-only link (or rename) and the directory fsync; a
  mismatch removes the temp file and raises ChecksumMismatchError: nothing becomes visible.

Keys starting with ``.epochal-internal`` are reserved.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from state_store.core import checksums
from state_store.core.ports import (
    ChecksumMismatchError,
    InvalidKeyError,
    ObjectAlreadyExists,
    ObjectData,
    ObjectInfo,
    ObjectNotFound,
    StorageFullError,
    StoreError,
    VersionMismatch,
    validate_key,
    validate_prefix,
)

_INTERNAL = ".epochal-internal"
_LOCK_STRIPES = 64


def _version(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalObjectStore:
    """Objects as files under ``root``; safe across threads and processes on one machine."""

    #: Reads are thread-safe (each opens its own file) but are NOT issued concurrently: a local
    #: read answers in microseconds, so a thread pool costs more than it overlaps (completing an S1
    #: checkpoint: 0.36 s with 16 reads in flight, 0.09 s sequentially). See
    #: ``state_store.core.parallel``; network stores (S3) declare ``max_concurrent_reads``.
    max_concurrent_reads = 1
    #: Writes may run concurrently (each stages its own temp file; fsync releases the GIL).
    max_concurrent_writes = 4

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self._root = Path(root).absolute()
        self._fsync = fsync
        if self._root.exists() and not self._root.is_dir():
            raise StoreError(
                f"local store {self._root} is a file, not a folder: point the store URI at a folder"
            )
        self._tmp = self._root / _INTERNAL / "tmp"
        self._locks = self._root / _INTERNAL / "locks"
        self._ready = False  # the internal folders are made by the first write: reads write nothing

    @property
    def uri(self) -> str:
        return self._root.as_uri()

    @property
    def root(self) -> Path:
        return self._root

    # -- helpers ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        if not self._ready:
            self._tmp.mkdir(parents=True, exist_ok=True)
            self._locks.mkdir(parents=True, exist_ok=True)
            self._ready = True

    def _path(self, key: str) -> Path:
        validate_key(key)
        if key.split("/", 1)[0] == _INTERNAL:
            raise InvalidKeyError(f"object key {key!r} is reserved by the local store")
        return self._root / key

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        self._prepare()
        stripe = int(hashlib.sha1(key.encode()).hexdigest(), 16) % _LOCK_STRIPES
        fd = os.open(self._locks / f"{stripe:02d}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _stage(self, key: str, data: bytes) -> Path:
        """Write ``data`` to a fresh temp file and fsync it; return its path."""
        self._prepare()
        tmp = self._tmp / f"{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "xb") as fh:
                fh.write(data)
                fh.flush()
                if self._fsync:
                    os.fsync(fh.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFullError(
                    f"no space left writing {key!r} to {self.uri}: free disk space and retry; "
                    "nothing was changed"
                ) from exc
            raise StoreError(f"cannot write {key!r} to {self.uri}: {exc}") from exc
        return tmp

    def _install(self, tmp: Path, final: Path, *, create_only: bool) -> None:
        """Move ``tmp`` to ``final`` (link for create-only, rename otherwise), retrying if a
        concurrent delete pruned the parent directory in between."""
        for _ in range(5):
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                if create_only:
                    os.link(tmp, final)
                    tmp.unlink()
                else:
                    os.replace(tmp, final)
                break
            except FileNotFoundError:
                continue
        else:  # pragma: no cover - needs a pathological delete storm
            raise StoreError(f"cannot install {final} in {self.uri}: its folder keeps vanishing")
        if self._fsync:
            _fsync_dir(final.parent)

    def _read(self, path: Path, key: str) -> tuple[bytes, os.stat_result]:
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                return fh.read(), st
        except FileNotFoundError:
            raise ObjectNotFound(f"object {key!r} not found in {self.uri}") from None
        except IsADirectoryError:
            raise ObjectNotFound(f"object {key!r} not found in {self.uri} (it is a folder)") from None

    # -- the port --------------------------------------------------------------------------
    def get(self, key: str) -> ObjectData:
        data, st = self._read(self._path(key), key)
        return ObjectData(key, data, _version(st))

    def head(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        if key.split("/", 1)[0] == _INTERNAL:
            raise InvalidKeyError(f"object key {key!r} is reserved by the local store")
        try:  # one stat of a plain string path (hot: every listing and verification calls this)
            st = os.stat(os.path.join(self._root, key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(key, st.st_size, _version(st), st.st_mtime_ns // 1_000_000)

    def put(self, key: str, data: bytes) -> str:
        final = self._path(key)
        tmp = self._stage(key, data)
        try:
            return self._replace(tmp, final, key)
        finally:
            tmp.unlink(missing_ok=True)

    def put_if_absent(self, key: str, data: bytes) -> str:
        final = self._path(key)
        tmp = self._stage(key, data)
        try:
            return self._create(tmp, final, key, data)
        finally:
            tmp.unlink(missing_ok=True)

    def put_verified(self, key: str, data: bytes, checksum: str, *, create_only: bool = False) -> str:
        """``put`` (``create_only``: ``put_if_absent``) of a data file whose writer computed
        ``checksum``: the staged file is read back and checksummed before it is installed (see the
        module docstring); ChecksumMismatchError, nothing written, if it does not match."""
        final = self._path(key)
        checksums.parse(checksum)  # a malformed checksum is refused before anything is written
        tmp = self._stage(key, data)
        try:
            actual = self._staged_checksum(tmp, checksum)
            if actual != checksum:
                raise ChecksumMismatchError(
                    f"upload of {key!r} to {self.uri} refused: the staged file has checksum {actual}, "
                    f"its writer computed {checksum}; nothing was written: retry (the bytes changed "
                    "between the writer and the disk)"
                )
            return self._create(tmp, final, key, data) if create_only else self._replace(tmp, final, key)
        finally:
            tmp.unlink(missing_ok=True)

    _READ_BACK_CHUNK = 8 << 20

    def _staged_checksum(self, tmp: Path, checksum: str) -> str:
        """The checksum (same algorithm as ``checksum``) of the staged file's bytes as read back."""
        algorithm, _ = checksums.parse(checksum)
        digest = checksums.new_hash(algorithm)
        buffer = bytearray(self._READ_BACK_CHUNK)
        view = memoryview(buffer)
        with open(tmp, "rb", buffering=0) as fh:
            while n := fh.readinto(buffer):
                digest.update(view[:n])
        return f"{algorithm}:{digest.hexdigest()}"

    def _replace(self, tmp: Path, final: Path, key: str) -> str:
        with self._key_lock(key):
            self._install(tmp, final, create_only=False)
            return _version(final.stat())

    def _create(self, tmp: Path, final: Path, key: str, data: bytes) -> str:
        try:
            self._install(tmp, final, create_only=True)
        except FileExistsError:
            current, st = self._read(final, key)
            if current == data:
                return _version(st)
            raise ObjectAlreadyExists(f"object {key!r} already exists in {self.uri}") from None
        return _version(final.stat())

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        final = self._path(key)
        tmp = self._stage(key, data)
        try:
            with self._key_lock(key):
                try:
                    current, st = self._read(final, key)
                except ObjectNotFound:
                    raise VersionMismatch(
                        f"object {key!r} in {self.uri} does not exist (expected version {expected_version!r})"
                    ) from None
                if _version(st) != expected_version:
                    if current == data:
                        return _version(st)
                    raise VersionMismatch(
                        f"object {key!r} in {self.uri} is not at version {expected_version!r}"
                    )
                self._install(tmp, final, create_only=False)
                return _version(final.stat())
        finally:
            tmp.unlink(missing_ok=True)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._root / base if base else self._root
        if not start.is_dir():
            return
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self._root)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d != _INTERNAL]
                rel_dir = ""
            for name in filenames:
                key = f"{rel_dir}/{name}" if rel_dir else name
                if key.startswith(prefix):
                    keys.append(key.replace(os.sep, "/"))
        for key in sorted(keys):
            info = self.head(key)
            if info is not None:
                yield info

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        except IsADirectoryError:
            return
        parent = path.parent
        while parent != self._root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
