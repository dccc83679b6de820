"""``epochal report`` writes one self-contained page with the same numbers as the API; bad input
exits 2 with one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spark_jobs.cli import main
from state_store.monitoring import CheckpointStats
from state_store.storage import open_store
from tests.unit.monitoring.support import JOB_ID, Made


def test_report_is_self_contained_and_lists_every_checkpoint(
    history: Made, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    code = main(
        ["report", "--job", JOB_ID, "--store", history.uri, "--out", str(out), "--json",
         "--airflow-url", "http://airflow.example:8080"]
    )  # fmt: skip
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    stats = CheckpointStats(open_store(history.uri)).stats(JOB_ID)
    assert printed == {"path": str(out), "checkpoints": len(stats.rows), "rows": len(stats.rows)}
    page = out.read_text()
    ids = [int(i) for i in re.findall(r'<tr class="checkpoint" data-id="(\d+)"', page)]
    assert ids == [r.checkpoint_id for r in reversed(stats.rows)]
    assert page.count('<svg class="chart"') == 2
    assert "http://airflow.example:8080/dags/epochal_monitored/runs/run-2" in page
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert f'data-count="failed"><span class="muted">failed</span><b>{stats.overview.failed}</b>' in page


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "x.txt"], "must end in .html"),
        (["--out", "/no/such/dir/r.html"], "does not exist; create it first"),
        (["--out", "r.html", "--limit", "0"], "report --limit 0 is invalid"),
        (["--out", "r.html", "--job", "nothing-here"], "job 'nothing-here' has no state"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    history: Made, argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    base = ["report", "--store", history.uri]
    if "--job" not in argv:
        base += ["--job", JOB_ID]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
