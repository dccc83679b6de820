"""BLAKE3 for the pure core's checksum registry (``state_store.core.checksums``).

Imported by the ``state_store`` package itself, so every process that uses the library (drivers,
Spark executors, Airflow workers, the CLI) can checksum and verify state files with BLAKE3 while
``state_store.core`` stays standard-library only. The ``blake3`` package (Rust, SIMD) hashes at
several GB/s per core and releases the GIL, so the restore's verification threads use every core;
a buffer of at least :data:`MULTITHREAD_BYTES` is hashed by BLAKE3's own threads as well (one large
file then still uses every core). Without the package, reading and writing BLAKE3-checksummed
files fails with a one-line error saying how to install it; SHA-256 files still verify.
"""

from __future__ import annotations

from state_store.core import checksums

MULTITHREAD_BYTES = 64 << 20
"""Buffers at least this large are hashed on BLAKE3's thread pool (one per core)."""

try:
    import blake3 as _blake3
except ImportError:  # pragma: no cover - blake3 is a dependency of the package
    checksums.unavailable(
        checksums.BLAKE3, "install the blake3 package (a dependency of Epochal: pip install blake3==1.0.11)"
    )
else:

    def _one_shot(data: bytes | bytearray | memoryview) -> str:
        if len(data) >= MULTITHREAD_BYTES:
            return _blake3.blake3(data, max_threads=_blake3.blake3.AUTO).hexdigest()
        return _blake3.blake3(data).hexdigest()

    checksums.register(checksums.BLAKE3, _blake3.blake3, _one_shot)
