"""The completion option (``deep_verify``, old name ``verify_sha256``), the checksum texts and the
per-kind format versions of the documents that list data files."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from state_store.core import CheckpointConfig, InvalidConfigError
from state_store.core.checksums import ChecksumError, checksum_of, hex_of, mismatch, parse
from state_store.core.codec import (
    FORMAT_VERSION,
    UnsupportedFormatVersion,
    decode_document,
    encode_document,
    format_version,
)
from state_store.core.manifests import AckRecord, DecisionRecord, Outcome, StateHandle, TaskId


def test_completion_reads_nothing_back_by_default() -> None:
    assert CheckpointConfig().deep_verify is False


def test_the_old_name_is_accepted_with_its_meaning_and_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="verify_sha256 is the old name of deep_verify"):
        on = CheckpointConfig(verify_sha256=True)
    assert on.deep_verify is True and on.verify_sha256 is None  # moved to the one setting read
    assert dataclasses.replace(on, deep_verify=False).deep_verify is False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert CheckpointConfig(verify_sha256=False).deep_verify is False
        assert CheckpointConfig(verify_sha256=True, deep_verify=True).deep_verify is True
        with pytest.raises(InvalidConfigError, match=r"contradict each other: .* give deep_verify only"):
            CheckpointConfig(verify_sha256=False, deep_verify=True)
    with pytest.raises(InvalidConfigError, match=r"deep_verify='yes' is invalid: use True or False"):
        CheckpointConfig(deep_verify="yes")  # type: ignore[arg-type]


def test_checksum_texts() -> None:
    data = b"abc"
    assert checksum_of(data) == "blake3:" + hex_of(data) and len(hex_of(data)) == 64
    assert checksum_of(data, "sha256").startswith("sha256:ba7816bf")
    assert mismatch(checksum_of(data), data) is None
    assert mismatch(checksum_of(data), b"abd") == checksum_of(b"abd")
    assert parse("sha256:" + "0" * 64) == ("sha256", "0" * 64)
    for bad in ("0" * 64, "blake3:" + "0" * 63, "BLAKE3:" + "0" * 64, "blake3:" + "G" * 64, ""):
        with pytest.raises(ChecksumError, match="is invalid"):
            parse(bad)
    with pytest.raises(ValueError, match=r"state file k: checksum 'ab' is invalid"):
        StateHandle("k", 1, "ab")


def test_documents_listing_data_files_are_format_2_the_others_stay_1() -> None:
    assert FORMAT_VERSION == 1
    assert {k: format_version(k) for k in ("ack", "metadata", "sink_commit")} == dict.fromkeys(
        ("ack", "metadata", "sink_commit"), 2
    )
    assert format_version("job") == format_version("decision") == format_version("latest") == 1
    ack = AckRecord(1, TaskId("op", 0), 1, 1, (StateHandle("k", 3, checksum_of(b"abc")),))
    data = encode_document("ack", ack)
    assert json.loads(data)["format_version"] == 2 and b'"checksum":"blake3:' in data
    assert decode_document(data, "ack", AckRecord, key="k") == ack
    assert (
        json.loads(encode_document("decision", DecisionRecord(1, Outcome.COMPLETE, 5)))["format_version"] == 1
    )
    newer = json.loads(data)
    newer["format_version"] = 3
    with pytest.raises(
        UnsupportedFormatVersion, match=r"ack document 'k' has format_version 3, .*\(2\): upgrade"
    ):
        decode_document(json.dumps(newer).encode(), "ack", AckRecord, key="k")


def test_a_job_opts_in_to_the_read_back() -> None:
    from spark_jobs.api.job import Job

    assert Job("j").checkpoint_config().deep_verify is False
    assert Job("j", deep_verify=True).checkpoint_config().deep_verify is True
    with pytest.raises(InvalidConfigError, match="deep_verify=1 is invalid"):
        Job("j", deep_verify=1)  # type: ignore[arg-type]
