"""Review of issue 23 items 1+2 (commit c2f4266): local recovery (``Job(local_recovery=True)``)
together with state on disk (``state_memory_mb``). Epochs adopt the kept spill store; a run file
changed, truncated or deleted in the spill directory between epochs, a crash at a kill point and a
rescale must each fall back to the store where needed and give exactly the in-memory result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.runtime import warm
from tests.unit.review23b.test_spill_equivalence import latest_metadata, run

SCALES = [2, 2, 2, 2, 2, 2]


@pytest.fixture(scope="module")
def heap(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap")
    return run((tmp / "store").as_uri(), False, tmp / "state", SCALES, keys=400)


def recovery(uri: str) -> set[str]:
    return {str(t.metrics.get("local_recovery")) for t in latest_metadata(uri).tasks if t.task.uid == "typed"}


def run_files(state_dir: Path) -> list[Path]:
    return sorted(p for p in state_dir.rglob("*.arrow") if p.is_file())


def damage(kind: str, state_dir: Path) -> None:
    files = run_files(state_dir)
    assert files, "no spill run file on disk to damage: nothing was kept"
    for path in files:
        data = bytearray(path.read_bytes())
        if kind == "flip":  # same size, other bytes (in the middle: the record batches)
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        elif kind == "truncate":
            path.write_bytes(bytes(data[: len(data) // 2]))
        elif kind == "delete":
            path.unlink()


@pytest.mark.parametrize("kind", ["flip", "truncate", "delete"])
def test_a_damaged_local_run_file_falls_back_to_the_store_and_stays_exactly_once(
    tmp_path: Path, kind: str, heap: tuple[list[str], dict[str, Any]]
) -> None:
    uri = (tmp_path / "store").as_uri()
    state_dir = tmp_path / "state"
    how: list[set[str]] = []

    def between(epoch: int) -> None:
        if epoch >= 1:
            how.append(recovery(uri))
        if epoch == 3:
            damage(kind, state_dir)

    warm_run = run(uri, True, state_dir, SCALES, keys=400, local_recovery=True, between=between)
    assert how[1] == {"adopted"}, how  # the case was exercised: epochs were adopted before the damage
    assert warm_run == heap


@pytest.mark.parametrize("point", ["after_state_upload", "before_ack", "after_ack", "before_metadata"])
def test_a_crash_after_adopted_epochs_recovers_exactly(
    tmp_path: Path, point: str, heap: tuple[list[str], dict[str, Any]]
) -> None:
    got = run((tmp_path / "store").as_uri(), True, tmp_path / "state", SCALES, keys=400,
              local_recovery=True, kill=(3, point))  # fmt: skip
    assert got == heap


def test_adopted_epochs_with_rescales_equal_in_memory(tmp_path: Path) -> None:
    scales = [1, 1, 1, 4, 4, 4, 2, 2]
    cold = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, keys=400)
    hot = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", scales, keys=400, local_recovery=True)
    assert hot == cold
    warm.clear()
    assert not run_files(tmp_path / "ds"), "disposed kept stores leave no run file behind"
