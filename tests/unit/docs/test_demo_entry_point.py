"""``make demo``'s entry point, ``python deploy/demo.py``, checked without running it.

The full demo (real ``airflow dags test`` runs, one failed) takes minutes -- 142 s of wall time
and 86 s of CPU with Spark on the shared 2-core build machine -- so ``make test`` cannot afford it.
Its pieces are covered instead: the DAG runs themselves (epochs, a run killed after its acks,
recovery) by tests/integration/airflow/test_epoch_dag.py, and here the demo's own wiring: the
Makefile command line, the job it loads (the clickstream example starting now), the DAGs and run
confs it triggers, the fault it injects (raised in the task, so Airflow records the failure), the
logical dates (now), the whole restore plan, and the closing pointer to ``make ui``.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.unit.docs.snippets import ROOT, makefile_targets

DEMO = ROOT / "deploy" / "demo.py"


def _manual_runs() -> list[tuple[str, set[str]]]:
    """(dag id, conf keys) of every ``manual(dag_id, conf)`` call in demo.py."""
    runs = []
    for node in ast.walk(ast.parse(DEMO.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "manual":
            dag_id, conf = node.args
            assert isinstance(dag_id, ast.Constant)
            if isinstance(conf, ast.Constant):
                keys = set(json.loads(conf.value))
            else:  # json.dumps({...})
                assert isinstance(conf, ast.Call) and isinstance(conf.args[0], ast.Dict)
                keys = {k.value for k in conf.args[0].keys if isinstance(k, ast.Constant)}
            runs.append((dag_id.value, keys))
    return runs


def test_the_makefile_command_line_starts_the_demo(tmp_path: Path) -> None:
    recipe = makefile_targets()["demo"].strip()
    assert "$(BIN)/python deploy/demo.py" in recipe, recipe
    words = shlex.split(recipe.replace("$(BIN)/python", sys.executable))
    env = {"PATH": "/usr/bin:/bin"}
    while "=" in words[0]:  # VAR=value prefixes of the recipe
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    result = subprocess.run(
        [*words, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "--executor" in result.stdout and "--fail-epoch" in result.stdout


def test_the_dags_and_run_confs_the_demo_triggers_exist(tmp_path: Path) -> None:
    from epochal_airflow.config import EpochalSettings
    from epochal_airflow.dag_factory import build_all

    from deploy import demo

    source = DEMO.read_text()
    assert '"EPOCHAL_JOBS": JOB_REF' in source and '"epochal_clickstream"' in source
    settings = {"AIRFLOW_HOME": str(tmp_path), "EPOCHAL_JOBS": demo.JOB_REF}
    dags = build_all(EpochalSettings.from_env(settings))
    runs = _manual_runs()
    assert [dag for dag, _ in runs] == ["epochal_savepoint", "epochal_restore"]
    assert "epochal_clickstream" in dags
    for dag_id, keys in runs:
        assert keys <= set(dags[dag_id].params.keys()), (
            f"{dag_id} has no params {keys - set(dags[dag_id].params)}"
        )


def test_the_injected_fault_is_a_valid_kill_point() -> None:
    from state_store.faults import kill_switch_from_env
    from state_store.testing import SimulatedCrash

    source = DEMO.read_text()
    # raised inside run_epoch (not a dead process): the task fails and Airflow records the DAG run
    assert '"EPOCHAL_FAULT": f"after_ack@{epoch}", "EPOCHAL_FAULT_MODE": "raise"' in source
    switch = kill_switch_from_env({"EPOCHAL_FAULT": "after_ack@2", "EPOCHAL_FAULT_MODE": "raise"})
    assert type(switch).__name__ == "KillAt"
    with pytest.raises(SimulatedCrash):
        switch("after_ack", 2)


def test_the_demo_job_starts_now_and_every_process_shares_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy import demo

    monkeypatch.setenv(demo.START_ENV, "1795600000000")
    job = demo.demo_job()
    assert job.job_id == "clickstream"
    assert job.graph.stages()[0].source_spec.source.end_offsets(1795600000000 + 1000)  # 1 s of clicks
    assert sum(job.graph.stages()[0].source_spec.source.end_offsets(1795600000000).values()) == 0
    monkeypatch.delenv(demo.START_ENV)
    monkeypatch.setattr(demo, "ROOT", Path("/nonexistent"))  # no .demo/start_ms of an earlier make demo
    now = time.time() * 1000
    fresh = sum(demo.demo_job().graph.stages()[0].source_spec.source.end_offsets(int(now)).values())
    assert fresh < 1000  # without a start: now, not 2023 (which would read a per-epoch cap)


def test_logical_dates_are_now() -> None:
    from deploy import demo

    date = datetime.fromisoformat(demo.logical_date())
    assert abs(date.timestamp() - time.time()) < 5 and date.tzinfo is not None


def test_the_whole_restore_plan_is_printed() -> None:
    from deploy import demo

    plan = [f"    row {i}" for i in range(20)]
    output = "\n".join(
        [
            "2026-11-26T06:54:01Z [info     ] epochal restore plan:",
            "Restore plan: savepoint 5 ...",
            *plan,
            "OK: restore ... [airflow.task.operators.epochal_airflow.operators.state] loc=x.py:1",
            "2026-11-26T06:54:02Z [info     ] epochal restore: job=clickstream [airflow.task.operators.x]",
        ]
    )
    lines = demo.restore_plan(output)
    assert lines[0] == "Restore plan: savepoint 5 ..." and lines[-1] == "OK: restore ..."
    assert len(lines) == 22


def test_the_demo_ends_with_how_to_look_at_it() -> None:
    source = DEMO.read_text()
    assert "make ui" in source and 'UI_URL = "http://127.0.0.1:8080/"' in source
    tail = source[source.rindex("done in") :]
    assert "make ui" in tail and "UI_URL" in tail
