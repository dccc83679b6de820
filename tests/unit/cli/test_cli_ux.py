"""The CLI as a tool (issue 22, item 6): tables by default and ``--json`` everywhere, no traceback
for a closed pipe, ``output`` prints rows without the runtime's columns, ``list`` marks LATEST and
``--all`` reads the history archive, unknown job ids and typos are one-line errors with a "did you
mean", ``--store`` from ``EPOCHAL_STORE_URI`` and plain paths, ``diff`` with options anywhere, a
complete ``--help`` and the ``keyed-counts`` example by its short name."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from spark_jobs.cli import main
from spark_jobs.commands import output
from spark_jobs.commands.parser import EpochalParser
from spark_jobs.commands.tree import build_parser
from state_store.core import killpoints
from tests.unit.cli.support import RUN, epochal

JOB = ["--job", "clickstream"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """clickstream after 4 epochs and a retention that kept 1 checkpoint (1-3 deleted)."""
    uri = (tmp_path_factory.mktemp("ux") / "store").as_uri()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["run", *JOB, "--store", uri, "--epochs", "4", *RUN]) == 0
        assert main(["retention", *JOB, "--store", uri, "--retain", "1", "--grace-ms", "0"]) == 0
    return uri


def leaves(parser: EpochalParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, EpochalParser]]:
    """Every runnable (sub-)subcommand: ("checkpoints list", its parser), ..."""
    for name, sub in parser.commands.items():
        if sub.commands:
            yield from leaves(sub, (*path, name))
        else:
            yield " ".join((*path, name)), sub


def one_line(err: str) -> str:
    assert err.strip() and err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err.strip()


# -- 1. tables by default, --json everywhere, a closed pipe ------------------------------------------
def test_checkpoints_show_prints_a_summary_and_json_only_when_asked(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = epochal(capsys, "checkpoints", "show", *JOB, "--store", store, "--id", "4")
    assert code == 0, err
    assert out.startswith("checkpoint 4 of job clickstream: completed (LATEST)")
    assert "dedup" in out and "page-counts-sink" in out and "clicks/p0" in out
    assert not out.lstrip().startswith("{") and len(out) < 4000
    code, latest, _ = epochal(capsys, "checkpoints", "show", *JOB, "--store", store)
    positional = epochal(capsys, "checkpoints", "show", "4", *JOB, "--store", store)[1]
    assert code == 0 and latest == out == positional  # no id: LATEST; an id may come first
    code, raw, _ = epochal(capsys, "checkpoints", "show", *JOB, "--store", store, "--id", "4", "--json")
    assert code == 0 and json.loads(raw)["checkpoint_id"] == 4 and json.loads(raw)["tasks"]


def test_every_command_that_prints_data_takes_json() -> None:
    missing = [name for name, parser in leaves(build_parser()) if "--json" not in parser.options]
    assert missing == []


def test_a_closed_pipe_ends_quietly_with_the_pipes_exit_code(store: str) -> None:
    """``epochal checkpoints show ... | head``: the reader is gone before the first byte."""
    child = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "checkpoints", "show", *JOB, "--store", store, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # as `head` does once it has its lines
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141
    assert err == ""


# -- 2. output prints rows -------------------------------------------------------------------------
def test_output_prints_rows_without_internal_columns(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["output", *JOB, "--store", store]  # the job's only sink: --sink may be left out
    code, out, err = epochal(capsys, *base, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and {"page", "window_start", "count"} <= set(rows[0])
    assert not [c for c in rows[0] if c.startswith("_")]
    code, out, _ = epochal(capsys, *base, "--json", "--all-columns", "--limit", "2")
    assert len(json.loads(out)) == 2 and "_ts" in json.loads(out)[0]

    code, out, _ = epochal(capsys, *base)  # not a terminal: CSV
    assert out.splitlines()[0].startswith('"page"') and "_ts" not in out.splitlines()[0]
    assert len(out.splitlines()) == len(rows) + 1
    monkeypatch.setattr(output, "interactive", lambda: True)
    code, out, _ = epochal(capsys, *base, "--sink", "page-counts-sink")  # a terminal: a table
    assert out.split()[:2] == ["page", "window_start"] and f"({len(rows)} rows)" in out

    target = tmp_path / "rows.csv"
    code, out, _ = epochal(capsys, *base, "--out", str(target))
    assert code == 0 and f"wrote {len(rows)} committed rows" in out
    assert len(pd.read_csv(target)) == len(rows) and "_ts" not in pd.read_csv(target).columns
    code, out, _ = epochal(capsys, *base, "--out", str(tmp_path / "rows.parquet"), "--json")
    assert json.loads(out)["rows"] == len(pd.read_parquet(tmp_path / "rows.parquet")) == len(rows)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "parquet"], "--format parquet writes a file: add --out PATH.parquet"),
        (["--out", "rows.txt"], "--out 'rows.txt': name the format with --format"),
        (["--sink", "page-count-sink"], "did you mean page-counts-sink?"),
        (["--format", "xml"], "--format 'xml' is not a choice"),
    ],
)
def test_output_refuses_bad_input_in_one_line(
    store: str, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = epochal(capsys, "output", *JOB, "--store", store, *extra)
    assert code == 2 and message in one_line(err)


# -- 3. list: LATEST, --all, unknown jobs ----------------------------------------------------------
def test_list_marks_latest_and_all_reads_the_history_archive(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = epochal(capsys, "checkpoints", "list", *JOB, "--store", store)
    lines = [line.split() for line in out.splitlines()[2:]]
    assert code == 0 and [line[0] for line in lines] == ["4"] and lines[0][-1] == "LATEST"
    code, out, _ = epochal(capsys, "checkpoints", "list", *JOB, "--store", store, "--all")
    body = out.splitlines()[2:]
    assert code == 0 and [line.split()[0] for line in body] == ["1", "2", "3", "4"]
    assert all("deleted by retention" in line for line in body[:3]) and "LATEST" in body[3]
    code, out, _ = epochal(capsys, "checkpoints", "list", *JOB, "--store", store, "--all", "--json")
    rows = json.loads(out)
    assert [(r["checkpoint_id"], r["retained"], r["latest"]) for r in rows] == [
        (1, False, False),
        (2, False, False),
        (3, False, False),
        (4, True, True),
    ]


def test_an_unknown_job_id_is_an_error_naming_the_known_ones(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = epochal(capsys, "checkpoints", "list", "--job", "clikstream", "--store", store)
    line = one_line(err)
    assert code == 2 and out == ""
    assert "job 'clikstream' has no state" in line and "did you mean clickstream?" in line
    assert "(jobs there: clickstream)" in line


# -- 4. did you mean -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["chekpoints", "list"], "epochal: unknown command 'chekpoints': did you mean checkpoints?"),
        (["run", "--job", "clickstream", "--exector", "local"], "epochal run: unknown option --exector: "
         "did you mean --executor?"),
        (["checkpoints", "lsit"], "epochal checkpoints: unknown command 'lsit': did you mean list?"),
        (["run", "--job", "x", "--executor", "lcoal"], "--executor 'lcoal' is not a choice: "
         "did you mean local?"),
        (["checkpoints", "list", "--jbo", "x"], "unknown option --jbo: did you mean --job?"),
        (["run", "--job", "x", "--fault", "after_ak"], "kill point 'after_ak' does not exist: did you mean "
         "after_ack?"),
    ],
)  # fmt: skip
def test_typos_get_one_line_with_did_you_mean_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = epochal(capsys, *argv)
    assert code == 2 and out == ""
    line = one_line(err)
    assert expected in line and "usage:" not in line


# -- 5. the store from the environment, plain paths ------------------------------------------------
def test_store_comes_from_epochal_store_uri_and_plain_paths_are_local_folders(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = ["checkpoints", "list", *JOB, "--json"]
    expected = epochal(capsys, *listing, "--store", store)[1]
    assert main(listing, env={"EPOCHAL_STORE_URI": store}) == 0
    assert capsys.readouterr().out == expected
    folder = Path(store.removeprefix("file://"))
    monkeypatch.chdir(folder.parent)
    assert main([*listing, "--store", f"./{folder.name}"], env={}) == 0  # relative: from the cwd
    assert capsys.readouterr().out == expected
    assert main([*listing, "--store", str(folder)], env={"EPOCHAL_STORE_URI": "s3://elsewhere/x"}) == 0
    assert capsys.readouterr().out == expected  # --store wins over the environment
    assert main(listing, env={}) == 2
    assert "no store given: add --store URI" in one_line(capsys.readouterr().err)


# -- 6. diff with the options anywhere -------------------------------------------------------------
def test_diff_takes_options_before_or_after_the_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = (tmp_path / "s").as_uri()
    assert epochal(capsys, "run", *JOB, "--store", uri, "--epochs", "2", *RUN)[0] == 0
    after = epochal(capsys, "checkpoints", "diff", *JOB, "--store", uri, "1", "2", "--json")
    before = epochal(capsys, "checkpoints", "diff", "1", "2", *JOB, "--store", uri, "--json")
    between = epochal(capsys, "checkpoints", "diff", "1", *JOB, "2", "--store", uri, "--json")
    assert after[0] == 0, after[2]
    assert after == before == between and json.loads(after[1])["dedup"]["added"] > 0
    code, out, _ = epochal(capsys, "checkpoints", "diff", *JOB, "--store", uri, "1", "2")
    assert code == 0 and out.splitlines()[1].split() == ["operator", "added", "removed", "changed"]


# -- 7. a complete --help ----------------------------------------------------------------------------
def test_help_lists_every_command_and_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "EPOCHAL_STORE_URI" in top and "``" not in top
    for name in parser.commands:
        assert f"    {name}" in top, f"`epochal --help` does not list {name}"
    for name, sub in leaves(parser):
        assert main([*name.split(), "--help"]) == 0
        text = capsys.readouterr().out
        assert "``" not in text, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help.strip(), f"epochal {name} {action.dest} has no help"
        if "--fault" in sub.options:
            assert all(point in " ".join(text.split()) for point in killpoints.ALL), name


def test_the_commands_that_honour_faults_take_fault_and_die_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from state_store.testing import SimulatedCrash

    with_fault = {name for name, sub in leaves(build_parser()) if "--fault" in sub.options}
    assert with_fault == {"run", "protocol-demo", "retention", "savepoint", "restore", "backfill"}
    uri = (tmp_path / "s").as_uri()
    with pytest.raises(SimulatedCrash, match="after_ack"):
        main(["protocol-demo", "--store", uri, "--fault", "after_ack@2"], env={"EPOCHAL_FAULT_MODE": "raise"})


# -- 8. keyed-counts by its short name, with output -------------------------------------------------
def small_keyed_counts() -> object:
    from spark_jobs.examples.keyed_counts import build_job

    return build_job(keys=300, fraction=0.1)


def test_keyed_counts_has_a_short_name_and_its_sink_receives_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from epochal_airflow.config import EpochalSettings

    from spark_jobs.jobs.loading import load_job

    assert load_job("keyed-counts").job_id == "keyed-counts"
    default = EpochalSettings.from_env({"AIRFLOW_HOME": str(tmp_path)}).jobs
    assert default == ("clickstream",)  # a name to run on request, not a DAG Airflow adds by default
    uri = (tmp_path / "s").as_uri()
    ref = f"{__name__}:small_keyed_counts"
    code, _, err = epochal(capsys, "run", "--job", ref, "--store", uri, "--epochs", "2", *RUN)
    assert code == 0, err
    code, out, err = epochal(capsys, "output", "--job", "keyed-counts", "--store", uri, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert 300 < len(rows) <= 300 + 30  # every key once, then (up to) 10% of them again
    assert set(rows[0]) == {"user", "count"} and max(r["count"] for r in rows) >= 2
