"""deploy/init_stack.py (the Compose stack's epochal-init step) against a real SeaweedFS S3 server:
it creates the bucket of EPOCHAL_STORE_URI idempotently, and the Airflow connection extras it prints
let EpochalStoreHook open a working store with create-only semantics."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from state_store.core.ports import ObjectAlreadyExists
from state_store.testing.seaweedfs import SeaweedFSServer
from tests.unit.deploy.compose import ROOT

pytestmark = pytest.mark.integration


def _init(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "init_stack.py"), *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_init_creates_the_bucket_once_and_the_hook_uses_it(
    seaweedfs: SeaweedFSServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.connection import Connection
    from epochal_airflow.hooks.store import EpochalStoreHook

    bucket = f"init-{uuid.uuid4().hex[:10]}"
    env = {
        "EPOCHAL_STORE_URI": f"s3://{bucket}/jobs",
        "EPOCHAL_S3_ENDPOINT": seaweedfs.endpoint_url,
        "S3_ACCESS_KEY": seaweedfs.access_key,
        "S3_SECRET_KEY": seaweedfs.secret_key,
        "S3_REGION": seaweedfs.region,
    }
    for _ in range(2):  # a re-run of the init service finds the bucket and succeeds
        result = _init(env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"epochal-init: bucket {bucket} is ready"
    assert bucket in {b["Name"] for b in seaweedfs.client().list_buckets()["Buckets"]}

    extra = _init(env, "--print-connection-extra").stdout
    conn = Connection(
        conn_id="epochal_s3", conn_type="aws", login=seaweedfs.access_key, password=seaweedfs.secret_key,
        extra=extra,
    )  # fmt: skip
    hook = EpochalStoreHook(env["EPOCHAL_STORE_URI"], "epochal_s3")
    monkeypatch.setattr(hook, "_connection", lambda: conn)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)  # get_store exports the connection's keys here
    store = hook.get_store()
    store.put_if_absent("probe/one", b"1")
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("probe/one", b"2")
    assert store.get("probe/one").data == b"1"


def test_init_refuses_a_store_that_is_not_s3_with_the_remedy() -> None:
    result = _init({"EPOCHAL_STORE_URI": "file:///tmp/x", "EPOCHAL_S3_ENDPOINT": "http://x:1",
                    "S3_ACCESS_KEY": "a", "S3_SECRET_KEY": "b"})  # fmt: skip
    assert result.returncode == 1
    assert "is not an s3://bucket/prefix URI" in result.stderr


def test_init_names_a_missing_setting() -> None:
    result = _init({"EPOCHAL_STORE_URI": "s3://b/jobs", "EPOCHAL_S3_ENDPOINT": "", "S3_ACCESS_KEY": "",
                    "S3_SECRET_KEY": ""})  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "epochal-init: EPOCHAL_S3_ENDPOINT is not set: copy .env.example to .env and fill it in"
    )
