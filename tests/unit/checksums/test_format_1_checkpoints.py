"""Checkpoints written before issue 20 (format version 1: data files listed with ``"sha256"``, shared
files named by their SHA-256) still restore, verify and validate, and a job continues from one.

The old layout is rebuilt here from a checkpoint this version wrote, exactly as the previous code
wrote it: every ``ack``, ``metadata`` and ``sink_commit`` document back to ``format_version`` 1 with
``{"key", "size", "sha256"}`` handles (also inside the ``snapshot`` parts), every ``shared/`` file
renamed to its SHA-256, ``LATEST`` naming the rewritten metadata, no ack bundles."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.cli import main
from spark_jobs.runtime.cycle import run_cycle
from state_store.core import AckRecord, JobLayout, load_completed
from state_store.core.codec import canonical_json, decode_document
from state_store.core.manifests import StateHandle
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, committed_rows, final_state, new_clock, small_job

HANDLE_KINDS = ("ack", "metadata", "sink_commit")


def _envelope(kind: str, body: Any, version: int) -> bytes:
    doc = {"body": body, "format_version": version, "kind": kind, "sha256": _sha(canonical_json(body))}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def downgrade_to_format_1(root: Path, job_id: str) -> dict[str, str]:
    """Rewrite job ``job_id`` under the local store ``root`` as format 1 (module docstring); return
    the renames of the shared files (new key -> old-format key)."""
    job_root = root / job_id
    docs = {p: json.loads(p.read_bytes()) for p in job_root.rglob("*.json") if "/ack-bundles/" not in str(p)}
    renames: dict[str, str] = {}

    def rename(key: str) -> str:
        if "/shared/" not in key:
            return key
        if key not in renames:
            data = (root / key).read_bytes()
            folder, _, name = key.rpartition("/")
            renames[key] = f"{folder}/{_sha(data)}.{name.rpartition('.')[2]}"
        return renames[key]

    def older(value: Any) -> Any:
        if isinstance(value, dict) and "checksum" in value and "key" in value:
            out = {k: older(v) for k, v in value.items() if k != "checksum"}
            out["key"] = rename(value["key"])
            out["sha256"] = _sha((root / value["key"]).read_bytes())
            return out
        if isinstance(value, dict):
            return {k: older(v) for k, v in value.items()}
        if isinstance(value, list):
            return [older(v) for v in value]
        return value

    for path, doc in docs.items():
        if doc.get("kind") in HANDLE_KINDS:
            path.write_bytes(_envelope(doc["kind"], older(doc["body"]), 1))
    for new, old in renames.items():
        (root / new).rename(root / old)
    for bundle in job_root.rglob("ack-bundles/*.json"):
        bundle.unlink()
    latest_path = job_root / "LATEST"
    latest = json.loads(latest_path.read_bytes())
    body = latest["body"]
    body["metadata_sha256"] = _sha((root / body["metadata_key"]).read_bytes())
    latest_path.write_bytes(_envelope("latest", body, 1))
    return renames


def epochs(uri: str, count: int, clock: Any, job: Any) -> None:
    for _ in range(count):
        clock.advance(STEP_MS)
        report = run_cycle(job, uri, clock)
        assert report.status == "completed", report


def test_a_format_1_ack_document_decodes_with_sha256_handles() -> None:
    body = {
        "checkpoint_id": 3,
        "task": {"uid": "op", "subtask": 0},
        "generation": 1,
        "attempt": 1,
        "handles": [{"key": "j/shared/op/a.arrow", "size": 5, "sha256": "ab" * 32}],
    }
    ack = decode_document(_envelope("ack", body, 1), "ack", AckRecord, key="k")
    assert ack.handles == (StateHandle("j/shared/op/a.arrow", 5, "sha256:" + "ab" * 32),)
    with pytest.raises(ValueError, match="checksum 'sha256:00' is invalid"):
        StateHandle.from_json({"key": "k", "size": 1, "sha256": "00"})


def test_format_1_checkpoints_restore_validate_and_the_job_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = small_job()
    reference, ours = tmp_path / "reference", tmp_path / "old"
    for root in (reference, ours):
        epochs(root.as_uri(), 2, new_clock(), job)
    renames = downgrade_to_format_1(ours, job.job_id)
    assert renames  # shared files now carry their SHA-256 name
    store, layout = open_store(ours.as_uri()), JobLayout(job.job_id)
    meta_text = store.get(layout.metadata(2)).data.decode()
    assert '"format_version":1' in meta_text and '"sha256":' in meta_text and "blake3" not in meta_text
    meta = load_completed(store, layout, 2, deep=True).metadata  # verified with SHA-256
    assert {h.algorithm for h in meta.handles} == {"sha256"}
    assert committed_rows(ours.as_uri(), job) == committed_rows(reference.as_uri(), job)

    args = ["--job", job.job_id, "--store", ours.as_uri()]
    assert main(["validate", "--deep", *args]) == 0
    assert "2 checkpoint(s) (1, 2)" in capsys.readouterr().out

    clock = new_clock()
    clock.advance(2 * STEP_MS)
    epochs(ours.as_uri(), 2, clock, job)  # restores from format 1, then from the mixed checkpoint
    epochs(reference.as_uri(), 2, clock_at(2), job)
    assert final_state(ours.as_uri(), job) == final_state(reference.as_uri(), job)
    assert committed_rows(ours.as_uri(), job) == committed_rows(reference.as_uri(), job)
    mixed = load_completed(store, layout, 3, deep=True).metadata  # unchanged key groups keep old files
    assert {h.algorithm for h in mixed.handles} == {"sha256", "blake3"}
    newest = load_completed(store, layout, 4, deep=True).metadata
    assert '"format_version":2' in store.get(layout.metadata(4)).data.decode()
    assert "blake3" in {h.algorithm for h in newest.handles}
    assert main(["validate", "--deep", *args]) == 0
    capsys.readouterr()


def clock_at(steps: int) -> Any:
    clock = new_clock()
    clock.advance(steps * STEP_MS)
    return clock


def test_a_damaged_format_1_file_is_found_and_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = small_job()
    epochs(tmp_path.as_uri(), 2, new_clock(), job)
    downgrade_to_format_1(tmp_path, job.job_id)
    store, layout = open_store(tmp_path.as_uri()), JobLayout(job.job_id)
    older = {h.key for h in load_completed(store, layout, 1).metadata.handles}
    key = sorted(
        h.key
        for h in load_completed(store, layout, 2).metadata.handles
        if "/shared/" in h.key and h.key not in older
    )[0]
    data = bytearray((tmp_path / key).read_bytes())
    data[-3] ^= 0x01
    (tmp_path / key).write_bytes(bytes(data))
    assert main(["validate", "--deep", "--job", job.job_id, "--store", tmp_path.as_uri()]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED state file {key} has checksum sha256:" in out and "metadata says sha256:" in out
    with pytest.raises(Exception, match=rf"state file {key} of checkpoint 2 has .* checksum sha256:"):
        epochs(tmp_path.as_uri(), 1, clock_at(2), job)
