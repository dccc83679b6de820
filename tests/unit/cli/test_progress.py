"""``epochal run`` shows progress while an epoch runs (plain lines into a pipe, a live bar on a
terminal, nothing with ``--json``) and a summary after it: records in/out, measured duration, state,
checkpoint and incremental size, the Spark UI when Spark runs."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from spark_jobs.commands.running import progress_reporter
from spark_jobs.runtime.progress import EpochSummary, RichReporter, StageTotal
from state_store.core import checkpoint_history
from state_store.storage import open_store
from tests.unit.cli.support import RUN, epochal


def test_run_into_a_pipe_prints_progress_lines_then_a_summary_per_epoch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = (tmp_path / "s").as_uri()
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *RUN, "--epochs", "2")
    assert code == 0, err
    lines = out.splitlines()
    assert "  epoch 1: stage 0 source clicks: 8,000/8,000 records" in lines, out
    assert "  epoch 2: stage 3 keyed: 2/2 subtasks" in lines, out
    summaries = [line for line in lines if line.startswith("epoch -> ")]
    assert len(summaries) == 2
    pattern = (
        r"epoch -> checkpoint 2: completed in [\d.]+ m?s; records in 8,000, out \d+; "
        r"state [\d.]+ KiB, checkpoint [\d.]+ KiB \(this epoch uploaded [\d.]+ KiB\)$"
    )
    assert re.match(pattern, summaries[1]), summaries[1]
    assert lines.index(summaries[0]) > lines.index("  epoch 1: stage 0 source clicks: 8,000/8,000 records")


def test_run_json_prints_the_summaries_and_no_progress(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = (tmp_path / "s").as_uri()
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *RUN, "--json")
    assert code == 0, err
    (summary,) = json.loads(out)  # nothing else on stdout
    row = checkpoint_history(open_store(store), "clickstream")[-1]
    assert summary["checkpoint_id"] == row.checkpoint_id and summary["status"] == "completed"
    assert summary["records_in"] == 8_000 and summary["records_out"] > 0
    assert summary["duration_ms"] > 0 and summary["spark_ui"] is None
    assert summary["state_bytes"] == row.state_bytes > 0
    assert summary["incremental_bytes"] == row.incremental_bytes > 0
    assert summary["checkpoint_bytes"] > summary["state_bytes"]  # state plus the metadata document


def test_a_skipped_epoch_summarizes_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = (tmp_path / "s").as_uri()
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *RUN)[0] == 0
    code, out, _ = epochal(
        capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local", "--replay-cut"
    )
    assert code == 0 and out.strip() == "epoch -> no checkpoint: skipped no new input"


def test_a_terminal_gets_a_live_bar_and_a_pipe_plain_lines() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Tty()
    reporter = progress_reporter(False, terminal)
    assert isinstance(reporter, RichReporter)
    reporter.progress.console.force_terminal = True  # pytest's environment may say "dumb"
    reporter.start("epoch 1", [StageTotal("stage 0 source clicks", 100, "records")])
    reporter.advance("stage 0 source clicks", 40)
    reporter.progress.refresh()
    reporter.finish()
    assert "epoch 1 stage 0 source clicks" in terminal.getvalue() and "40/100" in terminal.getvalue()
    assert progress_reporter(True, terminal) is None
    assert type(progress_reporter(False, io.StringIO())).__name__ == "LineReporter"


def test_the_summary_names_the_spark_ui_when_spark_ran() -> None:
    summary = EpochSummary(4, "completed", 10, 2, 1_250, 2048, 4096, 1024, "http://127.0.0.1:4040")
    assert summary.line() == (
        "epoch -> checkpoint 4: completed in 1.2 s; records in 10, out 2; state 2.0 KiB, checkpoint "
        "4.0 KiB (this epoch uploaded 1.0 KiB); Spark UI http://127.0.0.1:4040"
    )
    assert summary.to_json()["spark_ui"] == "http://127.0.0.1:4040"
