"""docker-compose.yml agrees with the project: pins, settings, mounts, secrets, health checks.

No Docker engine runs here, so the stack is never started by a test: these checks read the YAML
(with Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` interpolation from .env.example),
deploy/Dockerfile, pyproject.toml, constraints.txt and plugins/epochal_airflow/config.py, and fail
when one of them moves without the others.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from epochal_airflow.config import EpochalSettings

from tests.unit.deploy.compose import (
    ROOT,
    env_example,
    interpolate,
    load_compose,
    referenced_variables,
)

AIRFLOW_SERVICES = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
LONG_RUNNING = {"postgres", "seaweedfs", "spark-master", "spark-worker", *AIRFLOW_SERVICES}


def _pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return dict(
        re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)$", d).groups() for d in project if "==" in d
    )  # type: ignore[union-attr]


def _constraints() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {n.lower(): v for n, _, v in (line.partition("==") for line in lines if "==" in line)}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _dockerfile() -> str:
    return (ROOT / "deploy" / "Dockerfile").read_text()


def _arg_default(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", _dockerfile(), re.M)
    assert match, f"deploy/Dockerfile has no ARG {name}=<default>"
    return match.group(1)


def test_the_stack_has_every_service_of_the_deployment(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "seaweedfs", "epochal-init", *AIRFLOW_SERVICES, "spark-master",
                             "spark-worker"}  # fmt: skip
    for name, command in AIRFLOW_SERVICES.items():
        assert services[name]["command"] == command, name


def test_airflow_image_is_the_pinned_airflow_with_the_project_installed_from_constraints(
    services: dict[str, Any],
) -> None:
    airflow_pin = _pins()["apache-airflow"]
    assert _constraints()["apache-airflow"] == airflow_pin
    assert _arg_default("AIRFLOW_VERSION") == airflow_pin
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}" in _dockerfile()
    assert _arg_default("PYTHON_VERSION") == "3.11"  # requires-python of pyproject.toml
    assert re.search(r"pip install [^\n]*-c /opt/epochal/constraints\.txt -e /opt/epochal", _dockerfile())
    for name in [*AIRFLOW_SERVICES, "epochal-init", "spark-worker"]:
        build = services[name]["build"]
        assert build["dockerfile"] == "deploy/Dockerfile" and build["context"] == ".", name
        assert build["args"]["AIRFLOW_VERSION"] == airflow_pin, name
        assert services[name]["image"] == f"epochal-airflow:{airflow_pin}", name


def test_spark_master_and_worker_run_the_pinned_pyspark_version(services: dict[str, Any]) -> None:
    spark = _pins()["pyspark"]
    assert _constraints()["pyspark"] == spark == _pins()["pyspark-client"]
    image, _, tag = services["spark-master"]["image"].partition(":")
    assert image == "apache/spark" and tag.startswith(f"{spark}-"), tag
    assert "java17" in tag and "openjdk-17" in _dockerfile()  # one Java on both sides
    # the worker is the pyspark distribution of the Epochal image (constraints pin it), not a download
    assert "spark-3" not in _dockerfile() and "spark-4" not in _dockerfile()
    worker = services["spark-worker"]
    assert worker["entrypoint"] == ["/opt/epochal/spark-home/bin/spark-class"]
    assert "/opt/epochal/spark-home" in _dockerfile() and "import os, pyspark" in _dockerfile()
    assert worker["command"][:2] == ["org.apache.spark.deploy.worker.Worker", "spark://spark-master:7077"]
    master = services["spark-master"]["command"]
    assert master[1] == "org.apache.spark.deploy.master.Master"
    assert (
        master[master.index("--port") + 1] == "7077" and master[master.index("--host") + 1] == "spark-master"
    )
    assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_project_code_is_mounted_where_airflow_and_the_editable_install_look(
    services: dict[str, Any],
) -> None:
    for name in [*AIRFLOW_SERVICES, "epochal-init"]:
        env = services[name]["environment"]
        mounts = {m.split(":")[0]: m.split(":")[1] for m in services[name]["volumes"]}
        assert mounts["./dags"] == env["AIRFLOW__CORE__DAGS_FOLDER"], name
        assert mounts["./plugins"] == env["AIRFLOW__CORE__PLUGINS_FOLDER"], name
        assert mounts["./spark_jobs"] == "/opt/epochal/spark_jobs", (
            name
        )  # under `pip install -e /opt/epochal`
    assert "./spark_jobs:/opt/epochal/spark_jobs:ro" in services["spark-worker"]["volumes"]  # executors
    for host in ("dags/epochal_jobs.py", "plugins/epochal_airflow/dag_factory.py", "spark_jobs/cli.py"):
        assert (ROOT / host).is_file(), host
    assert "PYTHONPATH=/opt/epochal/plugins:/opt/epochal" in _dockerfile()


def test_the_spark_submit_path_finds_run_epoch_inside_the_containers(services: dict[str, Any]) -> None:
    """SparkSubmitEpochOperator submits the file RUN_EPOCH, found relative to its own module: in the
    container that module lives under the plugins mount, so the path must land in a mounted copy of
    spark_jobs/jobs/run_epoch.py."""
    from epochal_airflow.operators import spark_submit

    module = Path(spark_submit.__file__).resolve()
    target = Path(spark_submit.RUN_EPOCH).resolve().relative_to(ROOT)  # spark_jobs/jobs/run_epoch.py
    up = len(module.relative_to(ROOT).parts) - 1  # RUN_EPOCH = module.parents[up] / target on the host
    for name in ("airflow-scheduler", "epochal-init"):
        mounts = {m.split(":")[1]: m.split(":")[0] for m in services[name]["volumes"]}
        plugins_in_container = PurePosixPath(next(c for c, h in mounts.items() if h == "./plugins"))
        module_in_container = plugins_in_container / module.relative_to(ROOT / "plugins").as_posix()
        run_epoch_in_container = module_in_container.parents[up] / target.as_posix()
        host = next(
            (ROOT / h / run_epoch_in_container.relative_to(c)
             for c, h in mounts.items() if run_epoch_in_container.is_relative_to(c)),
            None,
        )  # fmt: skip
        assert host is not None and host.resolve() == Path(spark_submit.RUN_EPOCH).resolve(), (
            f"{name}: run_epoch.py resolves to {run_epoch_in_container}, which no mount provides"
        )


def _config_env_names() -> set[str]:
    source = (ROOT / "plugins" / "epochal_airflow" / "config.py").read_text()
    return set(re.findall(r"e\.get\(\s*\"(EPOCHAL_[A-Z_]+)\"", source))


def test_epochal_settings_in_the_stack_are_the_ones_the_dag_files_read(services: dict[str, Any]) -> None:
    read_by_config = _config_env_names()
    assert {"EPOCHAL_STORE_URI", "EPOCHAL_STORE_CONN_ID", "EPOCHAL_EXECUTOR"} <= read_by_config
    for name in [*AIRFLOW_SERVICES, "epochal-init"]:
        env = interpolate(services[name]["environment"], env_example())
        epochal = {k for k in env if k.startswith("EPOCHAL_")} - {"EPOCHAL_S3_ENDPOINT"}
        assert epochal == read_by_config, (
            f"{name}: unknown {epochal - read_by_config}, unset {read_by_config - epochal}"
        )
        settings = EpochalSettings.from_env(env)  # validates executor, restart strategy, spark conf ...
        assert settings.store_uri.startswith("s3://") and settings.conn_id
        assert settings.executor == "spark-submit" and settings.spark_conn_id == "spark_default"
        # executors connect back to the driver, which runs in the scheduler container (client mode)
        assert settings.spark_conf["spark.driver.host"] == "airflow-scheduler"
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"


def test_init_creates_the_bucket_and_connection_the_dags_use(services: dict[str, Any]) -> None:
    from deploy.init_stack import bucket_of, connection_extra

    init = services["epochal-init"]
    env = interpolate(init["environment"], env_example())
    script = init["command"][0]
    assert "airflow db migrate" in script and "python /opt/epochal/deploy/init_stack.py" in script
    assert 'airflow connections add "$EPOCHAL_STORE_CONN_ID" --conn-type aws' in interpolate(script, {})
    assert '--conn-login "$S3_ACCESS_KEY" --conn-password "$S3_SECRET_KEY"' in interpolate(script, {})
    spark_conn = (
        'airflow connections add "$EPOCHAL_SPARK_CONN_ID" --conn-type spark --conn-host spark://spark-master'
    )
    assert spark_conn in interpolate(script, {})
    assert "--conn-port 7077" in script
    # the connection extras are what EpochalStoreHook reads, and point at the SeaweedFS S3 gateway
    extra = json.loads(connection_extra(env))
    seaweed = services["seaweedfs"]["command"][0]
    port = re.search(r"-s3\.port=(\d+)", seaweed).group(1)  # type: ignore[union-attr]
    assert extra["endpoint_url"] == f"http://seaweedfs:{port}"
    assert extra["region_name"] == env["S3_REGION"]
    assert bucket_of(env["EPOCHAL_STORE_URI"]) == "epochal"
    assert init["depends_on"]["seaweedfs"]["condition"] == "service_healthy"
    for name in AIRFLOW_SERVICES:
        assert services[name]["depends_on"]["epochal-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_hook_resolves_the_init_connection_to_the_seaweedfs_endpoint(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.connection import Connection
    from epochal_airflow.hooks.store import EpochalStoreHook

    from deploy.init_stack import connection_extra

    env = interpolate(services["epochal-init"]["environment"], env_example())
    conn = Connection(
        conn_id=env["EPOCHAL_STORE_CONN_ID"], conn_type="aws", login="AK", password="SK",
        extra=connection_extra(env),
    )  # fmt: skip
    hook = EpochalStoreHook(env["EPOCHAL_STORE_URI"], env["EPOCHAL_STORE_CONN_ID"])
    monkeypatch.setattr(hook, "_connection", lambda: conn)
    assert (
        hook.resolved_uri() == "s3://epochal/jobs?endpoint_url=http%3A%2F%2Fseaweedfs%3A8333&region=us-east-1"
    )
    assert "SK" not in hook.resolved_uri()


def test_no_secret_is_committed(compose: dict[str, Any], services: dict[str, Any]) -> None:
    raw = (ROOT / "docker-compose.yml").read_text()
    example = env_example()
    missing = referenced_variables(raw) - set(example)
    assert not missing, f"docker-compose.yml uses variables that .env.example does not define: {missing}"
    secret = re.compile(r"PASSWORD|SECRET|FERNET|JWT|ACCESS_KEY")
    for name, service in services.items():
        for key, value in dict(service.get("environment") or {}).items():
            if secret.search(key):
                assert re.fullmatch(r"\$\{[A-Z0-9_]+:\?[^}]+\}", str(value)), (
                    f"{name}.{key} must be ${{VAR:?...}}"
                )
    for key, value in example.items():
        if secret.search(key):
            assert value == "change-me", f".env.example {key} must be the placeholder change-me"
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert "postgresql+psycopg2://${POSTGRES_USER:-airflow}:${POSTGRES_PASSWORD:?" in raw


def test_required_secret_fails_with_a_message_naming_the_remedy() -> None:
    with pytest.raises(ValueError, match=r"POSTGRES_PASSWORD.*\.env\.example"):
        interpolate("${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env (copy .env.example)}", {})


def test_health_checks_and_named_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck")
        assert check and check["test"], f"{name} has no healthcheck"
    assert services["seaweedfs"]["healthcheck"]["test"][-1] == "http://127.0.0.1:8333/healthz"
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    declared = set(compose["volumes"])
    used = {
        m.split(":")[0]
        for s in services.values()
        for m in s.get("volumes", [])
        if not m.startswith((".", "/"))
    }
    assert used == declared, f"declared {declared}, used {used}"
    assert {"postgres-data", "seaweedfs-data"} <= declared
