"""Review of issue 22's clocks (docs/clocks.md): the job's one clock under damage, races, odd
steps and commands that ask for the other clock; each refusal is one human line and changes nothing."""

from __future__ import annotations

import io
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.commands.common import clock_choice
from spark_jobs.commands.errors import UsageError
from state_store.clocks import ClockKind, read_clock, record_clock
from state_store.core import checkpoint_history
from state_store.storage import open_store
from tests.unit.cli.support import epochal, files

SIM = ["--executor", "local", "--clock", "simulated", "--time-step-ms", "10000"]
WALL = ["--executor", "local"]


def _one_line(err: str) -> str:
    line = err.strip()
    assert line and "\n" not in line, err
    assert "Traceback" not in line and not re.search(r"\b[A-Z][a-z]+(Error|Exception)\b", line), line
    return line


@pytest.fixture
def store(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def _clock_file(tmp_path: Path) -> Path:
    return tmp_path / "store" / "clickstream" / "_clock.json"


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b'{"kind": "clock", "job_id": "clickstream", "kind_": 1}', None],
    ids=["garbage", "wrong-shape", "unknown-kind"],
)
def test_a_damaged_clock_record_is_one_line_naming_the_file(
    capsys: pytest.CaptureFixture[str], store: str, tmp_path: Path, damage: bytes | None
) -> None:
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)[0] == 0
    path = _clock_file(tmp_path)
    if damage is None:
        text = path.read_text().replace('"simulated"', '"lunar"')
        assert '"lunar"' in text
        path.write_text(text)
    else:
        path.write_bytes(damage)
    before = files(tmp_path / "store")
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)
    assert code != 0 and not out.strip()
    line = _one_line(err)
    assert "_clock.json" in line, line
    assert files(tmp_path / "store") == before


def test_unknown_clock_kind_is_a_manifest_error_not_a_crash(store: str, tmp_path: Path) -> None:
    from state_store.core.codec import ManifestError

    s = open_store(store)
    record_clock(s, "clickstream", ClockKind.WALL, "test")
    path = _clock_file(tmp_path)
    path.write_text(path.read_text().replace('"wall"', '"lunar"'))
    with pytest.raises(ManifestError, match=r"_clock\.json"):
        read_clock(s, "clickstream")


def test_racing_first_records_agree_on_one_clock(store: str) -> None:
    s = open_store(store)
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def go(kind: ClockKind) -> None:
        barrier.wait()
        results.append(record_clock(s, "clickstream", kind, kind.value))

    threads = [
        threading.Thread(target=go, args=(ClockKind.WALL if i % 2 else ClockKind.SIMULATED,))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.kind for r in results}) == 1
    assert read_clock(s, "clickstream") == results[0]


def test_replay_cut_without_a_crashed_epoch_is_one_line(
    capsys: pytest.CaptureFixture[str], store: str
) -> None:
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)[0] == 0
    before = [r.checkpoint_id for r in checkpoint_history(open_store(store), "clickstream")]
    code, _, err = epochal(
        capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local", "--replay-cut"
    )
    # nothing new to read at the same cut: either refused in one line, or an epoch over the same
    # (empty) input -- never a crash, never a negative time
    if code != 0:
        line = _one_line(err)
        assert not re.search(r"(^|[\s(=])-\d", line), line
    else:
        rows = checkpoint_history(open_store(store), "clickstream")
        assert [r.checkpoint_id for r in rows][: len(before)] == before


@pytest.mark.parametrize("step", ["-5", str(366 * 24 * 3600 * 1000 + 1), "99999999999999999999"])
def test_bad_steps_are_one_line(capsys: pytest.CaptureFixture[str], store: str, step: str) -> None:
    code, out, err = epochal(
        capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local", "--time-step-ms", step
    )
    assert code == 2 and not out
    assert "--time-step-ms" in _one_line(err)


def test_simulated_without_a_step_is_one_line() -> None:
    import argparse

    with pytest.raises(UsageError, match="--time-step-ms"):
        clock_choice(
            argparse.Namespace(clock="simulated", time_step_ms=None, replay_cut=False), needs_step=True
        )


@pytest.mark.parametrize("command", ["restore", "savepoint"])
def test_restore_and_savepoint_with_the_other_clock_change_nothing(
    capsys: pytest.CaptureFixture[str], store: str, tmp_path: Path, command: str
) -> None:
    assert epochal(capsys, "run", "--job", "clickstream", "--store", store, *WALL)[0] == 0
    before = files(tmp_path / "store")
    extra = ["--name", "sp1"] if command == "savepoint" else []
    code, out, err = epochal(
        capsys, command, "--job", "clickstream", "--store", store, "--clock", "simulated", *extra
    )
    assert code == 2, (out, err)
    assert "runs on the wall clock" in _one_line(err)
    assert files(tmp_path / "store") == before
    code, out, err = epochal(
        capsys, command, "--job", "clickstream", "--store", store, "--time-step-ms", "1000", *extra
    )
    assert code == 2, (out, err)
    assert files(tmp_path / "store") == before


def test_progress_into_a_closed_pipe_does_not_crash_the_run(
    capsys: pytest.CaptureFixture[str], store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.commands import running

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self) -> bool:
            return False

    real = running.progress_reporter
    monkeypatch.setattr(running, "progress_reporter", lambda quiet, stream=None: real(quiet, Closed()))
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)
    assert code == 0, err
    assert len(checkpoint_history(open_store(store), "clickstream")) == 1


def test_json_output_is_pure_json_at_the_first_run(capsys: pytest.CaptureFixture[str], store: str) -> None:
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["status"] == "completed"


def test_non_tty_progress_is_plain_lines(capsys: pytest.CaptureFixture[str], store: str) -> None:
    code, out, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM)
    assert code == 0, err
    assert "\x1b[" not in out and "epoch -> checkpoint 1: completed" in out


def test_a_reporter_that_raises_mid_epoch_does_not_fail_it(
    capsys: pytest.CaptureFixture[str], store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.commands import running

    class Boom:
        def start(self, label: str, stages: Any) -> None:
            pass

        def advance(self, stage: str, amount: int) -> None:
            raise RuntimeError("reporter broke")

        def set(self, stage: str, done: int, total: int, unit: str) -> None:
            raise RuntimeError("reporter broke")

        def finish(self) -> None:
            raise RuntimeError("reporter broke")

    monkeypatch.setattr(running, "progress_reporter", lambda quiet, stream=None: Boom())
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, *SIM, "--epochs", "2")
    assert code == 0, err
    rows = checkpoint_history(open_store(store), "clickstream")
    assert [str(r.status) for r in rows] == ["completed", "completed"]
