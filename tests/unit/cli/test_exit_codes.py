"""One error tree (``state_store.core.errors``) decides the CLI's exit code: 1 for refused, failed or
damaged input, 2 for bad usage or input, always one line on stderr and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs import cli
from spark_jobs.jobs.loading import JobNotFoundError
from spark_jobs.lifecycle.pins import PinError
from spark_jobs.lifecycle.snapshots import SnapshotError
from state_store.core import BadInputError, EpochalError
from state_store.core.codec import ManifestError
from state_store.core.completed import ChainHeadError, CheckpointVerificationError
from state_store.core.layout import InvalidNameError
from state_store.core.lease import LeaseHeldError, LeaseLostError
from state_store.core.ports import StoreError, TransientStoreError
from state_store.faults import InvalidFaultSpec
from state_store.monitoring.reader import MonitoringError
from state_store.storage.uri import InvalidStoreURI

REFUSED = [ManifestError, StoreError, TransientStoreError, CheckpointVerificationError, ChainHeadError,
           LeaseHeldError, LeaseLostError, PinError]  # fmt: skip
BAD_INPUT = [cli.UsageError, InvalidStoreURI, InvalidNameError, InvalidFaultSpec, JobNotFoundError,
             SnapshotError, MonitoringError]  # fmt: skip


@pytest.mark.parametrize("error", REFUSED)
def test_refusals_and_damage_exit_1(error: type[Exception]) -> None:
    assert issubclass(error, EpochalError) and not issubclass(error, BadInputError)
    assert error.exit_code == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("error", BAD_INPUT)
def test_bad_input_exits_2_and_stays_a_value_error_where_it_was(error: type[Exception]) -> None:
    assert issubclass(error, BadInputError) and error.exit_code == 2  # type: ignore[attr-defined]
    assert error is cli.UsageError or issubclass(error, ValueError)


def test_the_cli_returns_the_trees_code_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = (tmp_path / "store").as_uri()
    assert cli.main(["checkpoints", "list", "--job", "no-such-job:x", "--store", store]) == 2
    assert cli.main(["checkpoints", "list", "--job", "clickstream", "--store", "ftp://x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("epochal: ") for line in err), err
    assert "Traceback" not in "".join(err)
    monkeypatch.setenv("EPOCHAL_FAULT", "after_lunch")
    assert cli.main(["run", "--job", "clickstream", "--store", store, "--epochs", "1"]) == 2
    assert "kill point 'after_lunch' does not exist" in capsys.readouterr().err
