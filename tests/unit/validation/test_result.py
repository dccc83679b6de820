"""ValidationResult: JSON round trip, integrity, storage through the ObjectStore port."""

from __future__ import annotations

import json

import pytest

from state_store.core.codec import ManifestError, UnsupportedFormatVersion
from state_store.core.ports import ObjectNotFound
from state_store.storage import MemoryObjectStore
from state_store.validation import (
    CheckResult,
    ValidationResult,
    load_result,
    save_result,
    validate_sink_output,
)

FAILED = ValidationResult(
    passed=False,
    suite="snapshot",
    checks=(
        CheckResult("keys_not_null", True, "10 rows, no null key"),
        CheckResult("keys_unique", False, '2 rows with duplicate keys, e.g. key="u1" (x2)', 2),
    ),
)


def test_json_round_trip_and_format_version() -> None:
    text = FAILED.to_json()
    document = json.loads(text)
    assert document["format_version"] == 1 and document["kind"] == "validation_result"
    assert document["body"]["checks"][1] == {
        "name": "keys_unique",
        "passed": False,
        "details": '2 rows with duplicate keys, e.g. key="u1" (x2)',
        "unexpected_count": 2,
    }
    assert ValidationResult.from_json(text) == FAILED
    assert ValidationResult.from_json(text.encode()) == FAILED


def test_real_result_round_trips() -> None:
    import pandas as pd

    frame = pd.DataFrame({"k": [1, 1, 2], "w": [0, 0, 0]})
    result = validate_sink_output(frame, ["k", "w"])
    assert not result.passed
    assert ValidationResult.from_json(result.to_json()) == result


def test_tampered_or_newer_documents_are_refused() -> None:
    document = json.loads(FAILED.to_json())
    document["body"]["passed"] = True
    with pytest.raises(ManifestError, match="checksum"):
        ValidationResult.from_json(json.dumps(document))
    document = json.loads(FAILED.to_json())
    document["format_version"] = 99
    with pytest.raises(UnsupportedFormatVersion):
        ValidationResult.from_json(json.dumps(document))
    with pytest.raises(ManifestError, match="not valid JSON"):
        ValidationResult.from_json(FAILED.to_json()[:40], source="chk-7/_validation.json")


def test_passed_must_agree_with_the_checks() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        ValidationResult(passed=True, suite="s", checks=FAILED.checks)
    assert ValidationResult.of("s", []).passed
    assert FAILED.failures == (FAILED.checks[1],)
    assert FAILED.summary_line() == (
        "validation snapshot: FAILED 1 of 2 checks "
        '(keys_unique: 2 rows with duplicate keys, e.g. key="u1" (x2))'
    )
    with pytest.raises(KeyError, match="no check 'nope'"):
        FAILED.check("nope")


def test_save_and_load_through_the_store() -> None:
    store = MemoryObjectStore()
    key = "job/checkpoints/chk-0000000007/_validation.json"
    save_result(store, key, FAILED)
    assert load_result(store, key) == FAILED
    passed = ValidationResult.of("snapshot", [CheckResult("keys_unique", True, "ok")])
    save_result(store, key, passed)  # a re-run audit replaces the result
    assert load_result(store, key) == passed
    with pytest.raises(ObjectNotFound):
        load_result(store, "job/missing.json")
    store.put("job/bad.json", b"{}")
    with pytest.raises(ManifestError):
        load_result(store, "job/bad.json")


def test_importing_the_package_does_not_import_great_expectations() -> None:
    # Reading stored results (CLI, Airflow UI) must not pay the multi-second GX import.
    import subprocess
    import sys

    code = "import sys, state_store.validation; print('great_expectations' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
