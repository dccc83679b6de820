"""One-shot set-up of the Compose stack (service ``epochal-init``): idempotent, safe to re-run.

1. create the S3 bucket named by ``EPOCHAL_STORE_URI`` (``s3://<bucket>/<prefix>``) on the SeaweedFS
   gateway at ``EPOCHAL_S3_ENDPOINT`` with the keys ``S3_ACCESS_KEY`` / ``S3_SECRET_KEY``;
2. write and read back a probe object, so a wrong key or endpoint fails here, not in the first epoch.

The Airflow connection (``EPOCHAL_STORE_CONN_ID``, conn type ``aws``, ``endpoint_url`` in its extras,
as ``epochal_airflow.hooks.store.EpochalStoreHook`` expects) is created by the init service's shell
command with ``airflow connections add``; ``--print-connection-extra`` prints its extras JSON.
"""

from __future__ import annotations

import json
import os
import sys
from urllib.parse import urlsplit


def _need(env: dict[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise SystemExit(f"epochal-init: {name} is not set: copy .env.example to .env and fill it in")
    return value


def bucket_of(store_uri: str) -> str:
    parts = urlsplit(store_uri)
    if parts.scheme != "s3" or not parts.netloc:
        raise SystemExit(
            f"epochal-init: EPOCHAL_STORE_URI={store_uri!r} is not an s3://bucket/prefix URI: "
            "the Compose stack keeps job state in SeaweedFS S3"
        )
    return parts.netloc


def connection_extra(env: dict[str, str]) -> str:
    return json.dumps(
        {
            "endpoint_url": _need(env, "EPOCHAL_S3_ENDPOINT"),
            "region_name": env.get("S3_REGION") or "us-east-1",
        }
    )


def create_bucket(env: dict[str, str]) -> str:
    import boto3
    from botocore.exceptions import ClientError

    bucket = bucket_of(_need(env, "EPOCHAL_STORE_URI"))
    s3 = boto3.client(
        "s3",
        endpoint_url=_need(env, "EPOCHAL_S3_ENDPOINT"),
        aws_access_key_id=_need(env, "S3_ACCESS_KEY"),
        aws_secret_access_key=_need(env, "S3_SECRET_KEY"),
        region_name=env.get("S3_REGION") or "us-east-1",
    )
    try:
        s3.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in (
            "BucketAlreadyOwnedByYou",
            "BucketAlreadyExists",
        ):
            raise
    s3.put_object(Bucket=bucket, Key="_epochal_init_probe", Body=b"ok")
    body = s3.get_object(Bucket=bucket, Key="_epochal_init_probe")["Body"].read()
    if body != b"ok":
        raise SystemExit(f"epochal-init: bucket {bucket} returned {body!r} for the probe object")
    s3.delete_object(Bucket=bucket, Key="_epochal_init_probe")
    return bucket


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    if args == ["--print-connection-extra"]:
        print(connection_extra(env))
        return 0
    if args:
        raise SystemExit("usage: init_stack.py [--print-connection-extra]")
    print(f"epochal-init: bucket {create_bucket(env)} is ready")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
