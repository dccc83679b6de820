"""Bad input: names that could escape the job root, and configuration with unknown keys or wrong
types, are refused with a one-line error naming the thing and the remedy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.cli import main
from spark_jobs.lifecycle.snapshots import savepoint_location
from spark_jobs.sources.generator import GeneratorSource
from state_store.core.config import CheckpointConfig
from state_store.core.layout import InvalidNameError, JobLayout, validate_name

BAD_NAMES = ["..", "../etc", "a/b", "/abs", "a\0b", "x" * 129, "", ".hidden", "a/../b", "a\\b", "a b"]


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
@pytest.mark.parametrize("kind", ["job id", "operator uid", "savepoint name", "sink uid"])
def test_unsafe_names_are_refused_with_the_rule(kind: str, bad: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_name(kind, bad)
    message = str(info.value)
    assert message.startswith(f"{kind} ") and "\n" not in message
    assert "no '/', no '..'" in message


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
def test_job_ids_layouts_savepoint_locations_and_uids_refuse_unsafe_names(bad: str) -> None:
    with pytest.raises(InvalidNameError, match="job id"):
        Job(bad)
    with pytest.raises(InvalidNameError, match="job id"):
        JobLayout(bad)
    with pytest.raises(InvalidNameError, match="savepoint name"):
        savepoint_location("file:///tmp/store", "job", bad)
    with pytest.raises(InvalidNameError, match="savepoint name"):
        JobLayout("job").savepoint_dir(bad)
    with pytest.raises(InvalidNameError, match="operator uid"):
        JobLayout("job").ack(1, bad, 0, 1, 1)
    job = Job("job")
    job.source(GeneratorSource(uid="clicks", partitions=1), uid=bad).sink(ParquetSink(), uid="out")
    with pytest.raises(ValueError, match="operator uid" if bad else "has no uid"):
        job.graph.stages()  # compiled (and validated) before anything runs or is written


def test_good_names_pass() -> None:
    for good in ["clickstream", "job-1", "a.b_c", "x" * 128]:
        assert validate_name("job id", good) == good


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["savepoint", "--job", "clickstream", "--name", "../escape"], "savepoint name"),
        (["savepoint", "--job", "clickstream", "--name", "a/b"], "savepoint name"),
        (["checkpoints", "list", "--job", "../other"], "job id"),
        (["retention", "--job", "a/../b"], "job id"),
    ],
)
def test_the_cli_refuses_unsafe_names_with_one_line_and_exit_2(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    code = main([*argv, "--store", store])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("epochal: ") and named in err and len(err.splitlines()) == 1
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.json"))


def test_the_cli_refuses_a_nul_in_a_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["checkpoints", "list", "--job", "a\0b", "--store", (tmp_path / "s").as_uri()])
    assert code == 2 and "job id" in capsys.readouterr().err


# -- configuration ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retained_checkpoints", "3"),
        ("retained_checkpoints", 0),
        ("timeout_ms", 1.5),
        ("orphan_grace_ms", -1),
        ("tolerable_failures", True),
        ("min_pause_ms", None),
    ],
)
def test_checkpoint_config_wrong_types_are_refused_naming_the_key(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"checkpoint config {field}=") as info:
        CheckpointConfig(**{field: value})  # type: ignore[arg-type]
    assert "use an integer" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("parallelism", "2"),
        ("max_parallelism", "128"),
        ("max_records_per_epoch", "5"),
        ("chunk_size", 0),
        ("mode", "exactly-twice"),
        ("retained_checkpoints", "3"),
    ],
)
def test_job_config_wrong_types_are_refused_naming_the_key(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field.replace("_", ".") if field != "mode" else "mode") as info:
        Job("job", **{field: value})  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_job_options_with_an_unknown_key_are_refused_naming_it() -> None:
    from spark_jobs.jobs.loading import load_job

    with pytest.raises(TypeError, match="'paralelism'"):
        load_job("clickstream", paralelism=2)


def _settings(env: dict[str, str]) -> object:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
    from epochal_airflow.config import EpochalSettings

    return EpochalSettings.from_env(env)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"EPOCHAL_RESTART": "fixed-delay:x:5"}, "EPOCHAL_RESTART"),
        ({"EPOCHAL_RESTART": "fixed-delay:1"}, "EPOCHAL_RESTART"),
        ({"EPOCHAL_EXECUTOR": "gpu"}, "EPOCHAL_EXECUTOR"),
        ({"EPOCHAL_SCHEDULE": ""}, "EPOCHAL_SCHEDULE"),
        ({"EPOCHAL_SPARK_CONF": "spark.hadoop.fs.s3a.secret.key=x"}, "credential"),
    ],
)
def test_airflow_settings_with_wrong_values_are_refused_naming_the_variable(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named) as info:
        _settings(env)
    assert "\n" not in str(info.value)


def test_airflow_settings_with_an_unknown_epochal_variable_are_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="EPOCHAL_EXECUTER"):
        _settings({"EPOCHAL_EXECUTER": "local"})


def test_an_unresponsive_s3_server_fails_a_request_within_a_bounded_time() -> None:
    """A paused server accepts connections and never answers: every request must give up (connect
    and read timeouts on every attempt, bounded retries) well before two minutes."""
    from state_store.storage import open_store

    store = open_store("s3://bucket/prefix?endpoint_url=http://127.0.0.1:9")
    assert store.request_deadline_s <= 90  # type: ignore[attr-defined]
