"""Restore refuses damaged snapshots (checksums) and, once snapshot roots are configured,
savepoint locations outside them unless explicitly allowed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.chaos.runner import ChaosConfig
from spark_jobs.lifecycle.restore import RestoreRequest, restore, roots_from_text
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.lifecycle.snapshots import SnapshotError
from spark_jobs.runtime.cycle import run_cycle
from state_store.clocks import ManualClock

CONFIG = ChaosConfig()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A job with two completed checkpoints and a savepoint in its store."""
    root = tmp_path_factory.mktemp("restore-guards")
    store = (root / "store").as_uri()
    job, clock = CONFIG.job(), ManualClock(CONFIG.start_ms)
    for _ in range(2):
        clock.advance(CONFIG.step_ms)
        assert run_cycle(job, store, clock).status == "completed"
    info = take_savepoint(job, store, clock, "sp1")
    return {"root": root, "store": store, "location": info["location"], "clock": clock}


def _copy(saved: dict[str, Any], name: str) -> tuple[str, Path]:
    src = Path(saved["location"].removeprefix("file://"))
    dst = saved["root"] / name
    if not dst.exists():
        shutil.copytree(src, dst)
    return dst.as_uri(), dst


def _restore(saved: dict[str, Any], tmp_path: Path, **request: Any) -> Any:
    target = (tmp_path / "target").as_uri()
    return restore(CONFIG.job(), target, ManualClock(CONFIG.start_ms), RestoreRequest(**request))


def test_a_savepoint_whose_file_does_not_match_its_checksum_is_refused(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    location, folder = _copy(saved, "damaged")
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != "_metadata.json"]
    victim = max(files, key=lambda p: p.stat().st_size)  # a state file
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped, same size
    victim.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="does not match its manifest") as info:
        _restore(saved, tmp_path, source=location)
    assert victim.name in str(info.value) and "copy the savepoint folder again" in str(info.value)
    assert not (tmp_path / "target").exists() or not any((tmp_path / "target").rglob("_metadata.json"))


def test_a_checkpoint_whose_state_file_was_altered_is_refused(saved: dict[str, Any], tmp_path: Path) -> None:
    store_dir = tmp_path / "copy"
    shutil.copytree(Path(saved["store"].removeprefix("file://")), store_dir)
    shared = sorted((store_dir / "clickstream" / "shared").rglob("*.arrow"))
    for path in shared:  # every state file of the job altered at the same size
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
    job = CONFIG.job()
    with pytest.raises(Exception, match="has checksum blake3:") as info:
        restore(job, store_dir.as_uri(), ManualClock(CONFIG.start_ms), RestoreRequest(source="2"))
    message = str(info.value)
    assert "failed verification" in message and "metadata says" in message and "\n" not in message
    assert "restore from checkpoint 1 or a savepoint" in message


def test_locations_outside_the_configured_roots_are_refused_unless_allowed(
    saved: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    location, _ = _copy(saved, "elsewhere")
    allowed_root = (saved["root"] / "approved").as_uri()
    roots = roots_from_text(f" {allowed_root} ,")  # what the entry points read from EPOCHAL_SNAPSHOT_ROOTS
    assert roots == (allowed_root,)
    with pytest.raises(SnapshotError, match="outside the configured snapshot roots") as info:
        _restore(saved, tmp_path, source=location, dry_run=True, roots=roots)
    message = str(info.value)
    assert location in message and "allow_outside_roots" in message and "\n" not in message
    # a path that only looks like it is under the root
    sneaky = allowed_root + "/../elsewhere"
    with pytest.raises(SnapshotError, match="outside the configured snapshot roots"):
        _restore(saved, tmp_path, source=sneaky, dry_run=True, roots=roots)
    # explicitly allowed, or under a configured root: accepted
    assert (
        _restore(saved, tmp_path, source=location, dry_run=True, roots=roots, allow_outside_roots=True).plan
        is not None
    )
    approved, _ = _copy(saved, "approved/sp1")
    assert _restore(saved, tmp_path, source=approved, dry_run=True, roots=roots).plan is not None


def test_the_entry_points_read_the_snapshot_roots_from_the_environment(
    saved: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from epochal_airflow.config import snapshot_roots

    from spark_jobs import cli

    location, _ = _copy(saved, "elsewhere")
    allowed_root = (saved["root"] / "approved").as_uri()
    assert snapshot_roots({"EPOCHAL_SNAPSHOT_ROOTS": f"{allowed_root},s3://b/p"}) == (
        allowed_root,
        "s3://b/p",
    )
    assert snapshot_roots({}) == ()
    monkeypatch.setenv("EPOCHAL_SNAPSHOT_ROOTS", allowed_root)
    target = (tmp_path / "cli-target").as_uri()
    code = cli.main(["restore", "--job", "clickstream", "--store", target, "--from", location, "--dry-run"])
    assert code != 0
    assert "outside the configured snapshot roots" in capsys.readouterr().err


def test_the_jobs_own_savepoints_are_always_inside_the_roots(saved: dict[str, Any]) -> None:
    job = CONFIG.job()
    request = RestoreRequest(
        source=saved["location"], dry_run=True, roots=("s3://approved-bucket/savepoints",)
    )
    report = restore(job, saved["store"], saved["clock"], request)
    assert report.plan is not None
