"""DESIGN section 2: the layer rules hold, and each can fail. ``state_store.core`` imports nothing
outside the standard library; every rule is an import-linter contract with a deliberate violation
that breaks it; the test kit and the environment stay where they belong.

import-linter checks the known third-party packages; this test checks every import statement of
every core module against ``sys.stdlib_module_names``, so a new dependency cannot slip in.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import state_store.core

CORE = Path(state_store.core.__file__).parent


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("state_store.core"):
                continue
            roots.add(node.module.split(".")[0])
    return roots


def test_core_modules_import_only_the_standard_library() -> None:
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 10
    offenders = {
        str(p.relative_to(CORE)): sorted(r for r in imported_roots(p) if r not in sys.stdlib_module_names)
        for p in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_reads_no_clock_and_opens_no_file() -> None:
    forbidden = ("time.time(", "time.monotonic(", "datetime.now(", "open(", "os.environ")
    hits = [
        f"{p.relative_to(CORE)}: {word}"
        for p in CORE.rglob("*.py")
        for word in forbidden
        if word in p.read_text().replace("def open(", "")
    ]
    assert hits == []


# -- every layer rule of DESIGN.md section 2 is a contract, and each contract can fail --------------
ROOT = CORE.parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

#: contract id -> (module file to append to, the import that breaks that contract alone)
VIOLATIONS = {
    "layers": ("state_store/storage/uri.py", "import spark_jobs.lifecycle.pins"),
    "pure-core": ("state_store/core/layout.py", "import pyarrow"),
    "library-no-engines": ("state_store/storage/memory.py", "import pyspark"),
    "runtime-no-airflow": ("spark_jobs/lifecycle/pins.py", "import airflow"),
    "adapters-independent": ("state_store/validation/result.py", "import state_store.formats"),
    "small-modules-on-core": ("state_store/clocks.py", "import state_store.storage"),
    "test-kit": ("spark_jobs/tools/report.py", "import state_store.testing"),
    "gx-behind-port": ("state_store/monitoring/model.py", "import great_expectations"),
    "boto3-behind-port": ("spark_jobs/sources/generator.py", "import boto3"),
    "no-cycles": ("spark_jobs/lifecycle/pins.py", "import spark_jobs.cli"),
}


def _contracts() -> dict[str, str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c["name"] for c in config["contracts"]}


def _lint(root: Path, *contract_ids: str) -> subprocess.CompletedProcess[str]:
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo", *(f"--contract={c}" for c in contract_ids)]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{root}{os.pathsep}{root / 'plugins'}"}
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_every_layer_rule_is_a_contract() -> None:
    assert set(_contracts()) == set(VIOLATIONS)


def test_the_tree_keeps_every_contract() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(VIOLATIONS)} kept, 0 broken." in result.stdout


def test_a_deliberate_violation_of_each_contract_fails_lint(tmp_path: Path) -> None:
    for package in ("state_store", "spark_jobs", "plugins/epochal_airflow"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, statement in VIOLATIONS.values():
        with (tmp_path / module).open("a") as f:
            f.write(f"\n{statement}  # deliberate violation (tests/unit/test_layers.py)\n")
    names = _contracts()
    result = _lint(tmp_path)
    assert result.returncode != 0
    out = " ".join(result.stdout.split())  # contract names wrap in the report
    for contract_id in VIOLATIONS:
        assert f"{' '.join(names[contract_id].split())} BROKEN" in out, (contract_id, result.stdout)
    assert f"Contracts: 0 kept, {len(VIOLATIONS)} broken." in result.stdout


# -- the test kit stays out of production; the environment is read at the entry points only ---------
PRODUCTION = ("state_store", "spark_jobs", "plugins", "dags", "deploy")
TEST_KIT_USERS = ("state_store/testing/", "spark_jobs/chaos/")
#: the modules that read the process environment: the entry points (CLI, run_epoch, the Airflow hook
#: and settings) and the process boundaries that must set a child's environment (the JVM of Spark,
#: spark-submit's PATH, the demo's Airflow processes, the test kit's S3 server).
ENV_READERS = (
    "spark_jobs/cli.py",
    "spark_jobs/jobs/",
    "spark_jobs/runtime/spark_session.py",
    "spark_jobs/sources/spark_table_session.py",
    "plugins/epochal_airflow/config.py",
    "plugins/epochal_airflow/hooks/store.py",
    "plugins/epochal_airflow/operators/spark_submit.py",
    "deploy/",
    "state_store/testing/",
)


def _production_modules() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(ROOT)), p.read_text())
        for top in PRODUCTION
        for p in sorted((ROOT / top).rglob("*.py"))
        if "__pycache__" not in p.parts
    ]


def test_only_tests_bench_and_chaos_import_the_test_kit() -> None:
    modules = _production_modules()
    assert len(modules) > 100
    offenders = [
        name
        for name, text in modules
        if re.search(
            r"^\s*(from state_store\.testing\b|import state_store\.testing\b|from state_store import testing)",  # noqa: E501
            text,
            re.M,
        )
        and not name.startswith(TEST_KIT_USERS)
    ]
    assert offenders == []


def test_nothing_below_the_entry_points_reads_the_environment() -> None:
    offenders = [
        name
        for name, text in _production_modules()
        if re.search(r"os\.environ|os\.getenv|getenv\(|environ\[", text) and not name.startswith(ENV_READERS)
    ]
    assert offenders == []


def test_dag_files_only_wire_the_provider() -> None:
    for path in (ROOT / "dags").glob("*.py"):
        roots = imported_roots(path) - {"__future__"}
        assert roots <= {"epochal_airflow"}, (path.name, roots)
