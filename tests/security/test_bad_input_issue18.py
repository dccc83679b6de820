"""Security and bad input found with issue 18, each with a test: credentials in locations, secrets
echoed by errors, times beyond any calendar, read-only commands that wrote, ``_stopped.json``
unchecked, ``EPOCHAL_FAULT`` ignored by some commands, and the CLI's small lies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.cli import main
from state_store.core import JobLayout, documents
from state_store.core.manifests import StoppedRecord
from state_store.storage import InvalidStoreURI, open_store
from tests.unit.cli.support import epochal, files

RUN = ["--executor", "local", "--time-step-ms", "10000"]


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    uri = (tmp_path / "store").as_uri()
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", uri, "--epochs", "2", *RUN)
    assert code == 0, err
    return uri


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/sp?endpoint_url=http://AKIAEXAMPLE:SECRETVALUE@127.0.0.1:8333",
        "s3://AKIAEXAMPLE:SECRETVALUE@bucket/p",
        "file://AKIAEXAMPLE:SECRETVALUE@localhost/tmp/x",
    ],
)
def test_userinfo_anywhere_in_a_location_is_refused_and_never_echoed(
    uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidStoreURI, match="credentials"):
        open_store(uri)
    for argv in (
        ["checkpoints", "list", "--job", "clickstream", "--store", uri],
        ["restore", "--job", "clickstream", "--store", "file:///tmp/nowhere-x", "--from", uri, "--dry-run"],
    ):
        code, out, err = epochal(capsys, *argv)
        assert code in (1, 2), err
        assert "SECRETVALUE" not in out + err and "AKIAEXAMPLE" not in out + err


def test_a_refused_uri_never_repeats_the_secret_it_carries(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = epochal(
        capsys, "checkpoints", "list", "--job", "j", "--store", "s3://b/p?aws_secret_access_key=TOPSECRET"
    )
    assert code == 2 and "unknown option(s) aws_secret_access_key" in err
    assert "TOPSECRET" not in out + err and "aws_secret_access_key=***" in err


@pytest.mark.parametrize("bad", ["s3://bucket/p?region=", "s3://bucket/p?region=us-east-1&region=eu-west-1"])
def test_an_empty_or_repeated_s3_option_is_refused(bad: str) -> None:
    with pytest.raises(InvalidStoreURI, match="region"):
        open_store(bad)


def test_a_time_step_beyond_any_calendar_is_refused_and_readers_survive_old_rows(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files(tmp_path / "store")
    code, _, err = epochal(
        capsys, "run", "--job", "clickstream", "--store", store, "--executor", "local",
        "--time-step-ms", "1000000000000000",
    )  # fmt: skip
    assert code == 2 and "--time-step-ms 1000000000000000 is invalid" in err
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--time-step-ms", "1e20")
    assert code == 2
    assert files(tmp_path / "store") == before
    from spark_jobs.cli import _fmt_ms

    assert _fmt_ms(10**18) == f"{10**18} ms"  # a reader shows the raw value instead of dying


def test_read_only_commands_write_nothing_and_refuse_a_missing_store_or_job(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = (tmp_path / "typo").as_uri()
    for argv in (
        ["checkpoints", "list", "--job", "clickstream", "--store", missing],
        ["savepoints", "list", "--job", "clickstream", "--store", missing],
        ["checkpoints", "list", "--job", "clikstream", "--store", store],
    ):
        code, _, err = epochal(capsys, *argv)
        assert code == 2 and ("does not exist" in err or "has no state" in err), err
    assert not (tmp_path / "typo").exists()
    code, _, err = epochal(
        capsys, "savepoint", "--job", "clickstream", "--store", store, "--name", "sp", "--time-step-ms", "1"
    )
    assert code == 0, err
    location = tmp_path / "store" / "clickstream" / "savepoints" / "sp"
    import shutil

    shutil.rmtree(location / ".epochal-internal")  # the writer's temp folder, not part of the snapshot
    before = files(location)
    code, _, err = epochal(
        capsys, "restore", "--job", "clickstream", "--store", store, "--from", location.as_uri(), "--dry-run"
    )
    assert code == 0, err
    assert files(location) == before  # NO_CLAIM: the snapshot is untouched, not even a temp folder
    a_file = tmp_path / "plain-file"
    a_file.write_text("x")
    code, _, err = epochal(capsys, "checkpoints", "list", "--job", "clickstream", "--store", a_file.as_uri())
    assert code == 2 and "is a file, not a folder" in err


def test_stopped_json_is_a_checksummed_document(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = epochal(
        capsys,
        "savepoint",
        "--job",
        "clickstream",
        "--store",
        store,
        "--name",
        "halt",
        "--stop",
        "--time-step-ms",
        "1",
    )
    assert code == 0, err
    key = JobLayout("clickstream").stopped
    record = documents.read(open_store(store), key, StoppedRecord)
    assert record.savepoint == "halt"
    (tmp_path / "store" / key).write_text('{"format_version": 1, "kind": "stopped", "body": {')
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "1", *RUN)
    assert code == 1 and key in err and "\n" not in err.strip()


@pytest.mark.parametrize(
    ("argv", "point"),
    [
        (["retention", "--job", "clickstream", "--retain", "1", "--grace-ms", "0"], "mid_retention"),
        (["restore", "--job", "clickstream", "--from", "latest"], "after_pending"),
        (["savepoint", "--job", "clickstream", "--name", "k", "--time-step-ms", "1"], "after_attempt"),
    ],
)
def test_epochal_fault_reaches_restore_retention_and_savepoint(
    store: str,
    argv: list[str],
    point: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from state_store.testing import SimulatedCrash

    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "2", *RUN)
    assert code == 0, err
    monkeypatch.setenv("EPOCHAL_FAULT", point)
    with pytest.raises(SimulatedCrash, match=point):
        main([*argv, "--store", store])
    monkeypatch.setenv("EPOCHAL_FAULT", "no_such_point")
    code, _, err = epochal(capsys, *argv, "--store", store)
    assert code == 2 and "kill point 'no_such_point' does not exist" in err


def test_small_cli_lies_are_gone(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "-1", *RUN)
    assert code == 2 and "--epochs -1 is invalid" in err
    out_file = tmp_path / "out.parquet"
    code, _, err = epochal(
        capsys, "output", "--job", "clickstream", "--store", store, "--sink", "nope", "--out", str(out_file)
    )
    assert code == 2 and "sink uid 'nope'" in err and "page-counts-sink" in err and not out_file.exists()
    inspect = [
        "inspect",
        "--job",
        "clickstream",
        "--store",
        store,
        "--checkpoint",
        "2",
        "--operator",
        "dedup",
    ]
    code, _, err = epochal(capsys, *inspect, "--out", str(tmp_path / "x.json"), "--max-parallelism", "7")
    assert code == 2 and "--max-parallelism 7 does not match job clickstream's 128" in err
    code, _, err = epochal(capsys, *inspect, "--out", str(tmp_path / "x.json"), "--key", "{nope")
    assert code == 2 and "--key '{nope' is not JSON" in err
    code, out, err = epochal(capsys, *inspect, "--out", str(tmp_path / "x.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["rows"] > 0
    code, _, err = epochal(
        capsys,
        "report",
        "--job",
        "clickstream",
        "--store",
        store,
        "--out",
        str(tmp_path / "no-such-folder" / "x.html"),
    )
    assert code == 2 and "does not exist; create it first" in err


def test_a_corrupt_metadata_shown_exits_1_not_2(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store" / JobLayout("clickstream").metadata(1)
    path.write_bytes(path.read_bytes()[:50])
    code, _, err = epochal(
        capsys, "checkpoints", "show", "--job", "clickstream", "--store", store, "--id", "1"
    )
    assert code == 1 and "not valid JSON" in err


def test_a_savepoint_manifest_with_a_string_max_parallelism_is_refused(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from state_store.core.codec import canonical_json, sha256_hex

    code, _, err = epochal(
        capsys, "savepoint", "--job", "clickstream", "--store", store, "--name", "m", "--time-step-ms", "1"
    )
    assert code == 0, err
    manifest = tmp_path / "store" / "clickstream" / "savepoints" / "m" / "_metadata.json"
    doc = json.loads(manifest.read_bytes())
    doc["body"]["body"]["max_parallelism"] = "128"
    doc["sha256"] = sha256_hex(canonical_json(doc["body"]))
    manifest.write_text(json.dumps(doc))
    code, _, err = epochal(
        capsys,
        "restore",
        "--job",
        "clickstream",
        "--store",
        store,
        "--from",
        manifest.parent.as_uri(),
        "--dry-run",
    )
    assert code == 2 and "max_parallelism '128'" in err
