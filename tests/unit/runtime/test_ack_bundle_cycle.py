"""An epoch run bundles the acks its subtasks wrote; without the bundle the cycle is unchanged."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.runtime import cycle as cycle_module
from state_store.core import JobLayout
from state_store.core.ports import TransientStoreError
from state_store.storage import open_store
from tests.unit.runtime.support import (
    STEP_MS,
    assert_acks_bundled,
    committed_rows,
    cycle,
    final_state,
    new_clock,
    small_job,
)


def run(uri: str, epochs: int = 3) -> tuple[list[Any], dict[str, Any]]:
    job, clock = small_job(), new_clock()
    for _ in range(epochs):
        clock.advance(STEP_MS)
        assert cycle(job, uri, clock).status == "completed"
    return committed_rows(uri, job), final_state(uri, job)


def test_every_ack_of_every_epoch_is_in_its_run_s_bundle(tmp_path: Path) -> None:
    uri = tmp_path.as_uri()
    run(uri)
    # 2 source subtasks + the stateful and sink acks of 2 keyed subtasks, per stored checkpoint
    assert assert_acks_bundled(uri, small_job()) >= 6


def test_a_failed_bundle_write_is_logged_and_changes_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    expected = run((tmp_path / "bundled").as_uri())

    def refuse(*_: Any, **__: Any) -> None:
        raise TransientStoreError("injected 503 on the ack bundle")

    monkeypatch.setattr(cycle_module, "write_ack_bundle", refuse)
    uri = (tmp_path / "unbundled").as_uri()
    with caplog.at_level(logging.WARNING, logger=cycle_module.__name__):
        assert run(uri) == expected
    assert "ack bundle not written (injected 503 on the ack bundle)" in caplog.text
    layout = JobLayout(small_job().job_id)
    assert not [i for i in open_store(uri).list(layout.root) if "/ack-bundles/" in i.key]
