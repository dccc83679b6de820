"""A damaged ``_metadata.json`` on the latest checkpoint is refused with the file named -- the next
epoch, ``restore --dry-run`` and the CLI all say so -- and nothing is re-committed (issue 18). The
older checkpoint is taken only explicitly (a forced restore, which retracts the output committed
since) or automatically where that is provably safe (no sink committed the damaged one's output)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_jobs.cli import main as epochal
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from state_store.core import ChainHeadError, JobLayout
from state_store.core.codec import canonical_json, sha256_hex
from state_store.storage import open_store
from tests.unit.cli.support import files
from tests.unit.runtime.support import SINK, STEP_MS, committed_rows, cycle, new_clock, small_job


def _edit_body(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:  # type: ignore[type-arg]
    """Edit the body and recompute its checksum: the document is self-consistent but lies."""

    def edit(data: bytes) -> bytes:
        doc = json.loads(data)
        change(doc["body"])
        doc["sha256"] = sha256_hex(canonical_json(doc["body"]))
        return json.dumps(doc).encode()

    return edit


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[: len(b) // 2],
    "field_edited_checksum_stale": lambda b: b.replace(b'"trigger_ms":', b'"trigger_ms":9', 1),
    "id_contradicts_folder": _edit_body(lambda body: body.update(checkpoint_id=1)),
    "generation_contradicts_trigger": _edit_body(lambda body: body.update(generation=7)),
    "base_contradicts_trigger": _edit_body(lambda body: body["positions"].update(base=None)),
    "completion_contradicts_decision": _edit_body(lambda body: body.update(completed_ms=1)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_latest_metadata_is_refused_everywhere_and_nothing_is_recommitted(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    uri, job, clock = root.as_uri(), small_job(), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    key = JobLayout(job.job_id).metadata(2)
    path = root / key
    path.write_bytes(DAMAGES[damage](path.read_bytes()))
    rows, before = committed_rows(uri, job), files(root)

    clock.advance(STEP_MS)
    with pytest.raises(ChainHeadError) as refused:
        cycle(job, uri, clock)
    assert key in str(refused.value) and "already committed its output" in str(refused.value)
    with pytest.raises(ChainHeadError, match=key):
        restore(job, uri, clock, RestoreRequest(source="latest", dry_run=True))
    assert committed_rows(uri, job) == rows

    for argv in (
        ["run", "--job", "clickstream", "--epochs", "1", "--executor", "local", "--time-step-ms", "10000"],
        ["restore", "--job", "clickstream", "--from", "latest", "--dry-run"],
    ):
        assert epochal([*argv, "--store", uri]) == 1
        err = capsys.readouterr().err.strip()
        assert key in err and "\n" not in err, err
    assert committed_rows(uri, job) == rows
    changed = {k for k in files(root) if files(root).get(k) != before.get(k) and "_job.json" not in k}
    assert not changed, changed  # the lease came and went; nothing else was written


def test_a_forced_restore_past_a_damaged_head_retracts_its_output_and_reprocesses_it_once(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    uri, job, clock = root.as_uri(), small_job(), new_clock()
    for _ in range(3):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    fault_free = committed_rows(uri, job)
    path = root / JobLayout(job.job_id).metadata(3)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ChainHeadError, match="pass --force"):
        restore(job, uri, clock, RestoreRequest(source="2"))
    report = restore(job, uri, clock, RestoreRequest(source="2", force=True))
    assert report.checkpoint_id == 4
    assert len(committed_rows(uri, job)) < len(fault_free)  # checkpoint 3's output is retracted
    clock.advance(0)  # the reprocessed epoch reads the same input cut as checkpoint 3 did
    again = cycle(job, uri, clock, drain=False)
    assert again.status == "completed"
    assert committed_rows(uri, job) == fault_free  # once, not twice


def test_a_damaged_head_without_committed_output_falls_back_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    uri, job, clock = root.as_uri(), small_job(), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    reference = committed_rows(uri, job)
    store = open_store(uri)
    store.delete(f"{job.job_id}/sinks/{SINK}/_commits/{2:010d}.json")  # died before notify
    path = root / JobLayout(job.job_id).metadata(2)
    path.write_bytes(b"")
    clock.advance(0)
    with caplog.at_level("WARNING"):
        report = cycle(job, uri, clock)
    assert report.status == "completed"
    assert "checkpoint 2 cannot be used" in caplog.text and "resumes from checkpoint 1" in caplog.text
    assert store.head(JobLayout(job.job_id).quarantined(2)) is not None
    assert committed_rows(uri, job) == reference
