"""A process that keeps state on disk allocates Arrow memory with jemalloc, unless its operator chose
an allocator (``ARROW_DEFAULT_MEMORY_POOL``); a job with its state in memory leaves Arrow's default
alone. Each case runs in a child process: the default pool is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import sys, tempfile
from pathlib import Path
import pyarrow as pa
from tests.unit.runtime import test_spill_state as suite

before = pa.default_memory_pool().backend_name
with tempfile.TemporaryDirectory() as tmp:
    suite.run((Path(tmp) / "store").as_uri(), sys.argv[1] == "disk", Path(tmp) / "state", epochs=2)
print(before, pa.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize(
    ("state", "chosen", "expected"),
    [
        ("disk", None, "jemalloc"),
        ("disk", "system", "system"),
        ("memory", None, "mimalloc"),
    ],
)
def test_state_on_disk_switches_arrow_to_jemalloc_unless_the_operator_chose(
    state: str, chosen: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    out = subprocess.run(
        [sys.executable, "-c", CHILD, state],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],
    )
    before, after = out.stdout.split()
    assert before == (chosen or "mimalloc")
    assert after == expected, out.stderr[-2000:]
