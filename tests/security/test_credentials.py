"""Credentials (the SeaweedFS access and secret keys) never appear in anything Epochal writes or
says: every object in the bucket (keys and bytes), captured logs, the CLI's stdout/stderr, the
chaos harness's error notes (the texts of every failure under S3 faults), and error messages of
refused or failing operations. XComs and Airflow logs are scanned by
tests/integration/airflow/test_epoch_dag.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from spark_jobs.chaos.runner import ChaosConfig, run_schedule
from spark_jobs.chaos.schedule import FaultEvent, Schedule
from spark_jobs.cli import main
from state_store.storage import open_store
from state_store.storage.uri import InvalidStoreURI
from state_store.testing.seaweedfs import SeaweedFSServer

CONFIG = ChaosConfig()  # a real store stamps files with the wall clock: the harness allows for it


@pytest.fixture(scope="module")
def server() -> Iterator[SeaweedFSServer]:
    s = SeaweedFSServer().start()
    try:
        yield s
    finally:
        s.stop(grace_s=1)


def _secrets(server: SeaweedFSServer) -> list[str]:
    return [server.access_key, server.secret_key]


def _assert_clean(text: str, server: SeaweedFSServer, where: str) -> None:
    for secret in _secrets(server):
        assert secret not in text, f"a credential leaked into {where}"


def _scan_bucket(server: SeaweedFSServer, bucket: str) -> int:
    client = server.client()
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            for secret in _secrets(server):
                assert secret not in item["Key"] and secret.encode() not in body, item["Key"]
            count += 1
    return count


def test_no_credentials_in_store_objects_logs_or_error_notes_under_s3_faults(
    server: SeaweedFSServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    inner = server.make_store("secrets", "chaos", max_attempts=2, connect_timeout=2, read_timeout=10)
    faults = (
        FaultEvent(0, "lost_response", 1),
        FaultEvent(1, "s3_500", 2),
        FaultEvent(1, "kill:after_ack", 3),
    )
    result = run_schedule(Schedule(11, CONFIG.ticks, faults, 0.5), CONFIG, inner=inner)
    assert not result.violations, [str(v) for v in result.violations]
    assert result.notes, "the faults produced no error texts to scan"
    _assert_clean("\n".join(result.notes), server, "error messages")
    _assert_clean(caplog.text, server, "logs")
    assert _scan_bucket(server, "secrets") > 20


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_no_credentials_in_cli_output_or_errors(
    server: SeaweedFSServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.make_store("cli", "")  # creates the bucket
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", server.region)
    uri = server.uri("cli", "jobs")
    outputs = []
    code, text = _cli(["run", "--job", "clickstream", "--store", uri, "--epochs", "1", "--executor", "local",
                       "--time-step-ms", "10000", "--json"], capsys)  # fmt: skip
    assert code == 0 and '"completed"' in text, text[-400:]
    outputs.append(text)
    wrong_secret = "wrong-" + server.secret_key[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong_secret)
    code, text = _cli(["checkpoints", "list", "--job", "clickstream", "--store", uri], capsys)
    assert code != 0 and text.startswith("epochal: "), text
    assert wrong_secret not in text
    outputs.append(text)
    _assert_clean("\n".join(outputs), server, "CLI output")
    assert _scan_bucket(server, "cli") > 10


def test_credentials_in_a_store_uri_are_refused_without_echoing_them(server: SeaweedFSServer) -> None:
    uri = f"s3://{server.access_key}:{server.secret_key}@bucket/prefix?endpoint_url={server.endpoint_url}"
    with pytest.raises(InvalidStoreURI) as info:
        open_store(uri)
    _assert_clean(str(info.value), server, "the refusal")
    assert "must not carry credentials" in str(info.value)


def test_store_errors_do_not_carry_credentials(server: SeaweedFSServer) -> None:
    store = server.make_store("errors", "x", max_attempts=1, connect_timeout=1, read_timeout=2)
    messages = []
    for call in (lambda: store.get("missing/key.json"), lambda: store.put_if_match("k", b"x", "nope")):
        try:
            call()
        except Exception as exc:
            messages.append(f"{type(exc).__name__}: {exc}")
    assert len(messages) == 2
    _assert_clean("\n".join(messages), server, "store error messages")
