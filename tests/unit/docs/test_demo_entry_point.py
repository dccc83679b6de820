"""``make demo``'s entry point, ``python deploy/demo.py``, checked without running it.

The full demo (real ``airflow dags test`` runs, one killed) takes minutes -- 13.7 min of wall time
and 2 min 44 s of CPU with ``--executor local`` on the shared 2-core build machine -- so
``make test`` cannot afford it. Its pieces are covered instead: the DAG runs themselves (epochs, a
run killed after its acks, recovery) by tests/integration/airflow/test_epoch_dag.py, and here the
demo's own wiring: the Makefile command line, the DAGs and run confs it triggers, the fault it
injects.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

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

    source = DEMO.read_text()
    assert '"EPOCHAL_JOBS": "clickstream"' in source and '"epochal_clickstream"' in source
    dags = build_all(EpochalSettings.from_env({"AIRFLOW_HOME": str(tmp_path), "EPOCHAL_JOBS": "clickstream"}))
    runs = _manual_runs()
    assert [dag for dag, _ in runs] == ["epochal_savepoint", "epochal_restore"]
    assert "epochal_clickstream" in dags
    for dag_id, keys in runs:
        assert keys <= set(dags[dag_id].params.keys()), (
            f"{dag_id} has no params {keys - set(dags[dag_id].params)}"
        )


def test_the_injected_fault_is_a_valid_kill_point() -> None:
    from state_store.faults import kill_switch_from_env

    source = DEMO.read_text()
    assert '"EPOCHAL_FAULT": f"after_ack@{epoch}", "EPOCHAL_FAULT_MODE": "exit"' in source
    switch = kill_switch_from_env({"EPOCHAL_FAULT": "after_ack@2", "EPOCHAL_FAULT_MODE": "exit"})
    assert type(switch).__name__ == "KillAt"
