"""docs/configuration.md names every setting the code reads, so a new key cannot go undocumented.

Sources of truth: every ``EPOCHAL_*`` name in the code (state_store, spark_jobs, plugins, dags), the
fields of ``Job`` and ``CheckpointConfig``, every option of every ``epochal`` subcommand (from the
argparse parser itself), and every failure reason in docs/operations.md.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re

from spark_jobs.api.job import Job
from spark_jobs.cli import build_parser
from state_store.core.config import CheckpointConfig
from state_store.core.failures import CheckpointFailureReason
from tests.unit.docs.snippets import ROOT

CONFIG = (ROOT / "docs" / "configuration.md").read_text()


def _code_env_names() -> set[str]:
    """String literals that are exactly an ``EPOCHAL_*`` name (``os.environ.get("EPOCHAL_X")``,
    ``e.get(...)``, constants); names merely mentioned in docstrings or messages are not settings."""
    names: set[str] = set()
    for folder in ("state_store", "spark_jobs", "plugins", "dags"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                value = node.value if isinstance(node, ast.Constant) else None
                if isinstance(value, str) and re.fullmatch(r"EPOCHAL_[A-Z][A-Z0-9_]*", value):
                    names.add(value)
    return names


def test_every_epochal_environment_variable_is_documented() -> None:
    names = _code_env_names()
    assert {
        "EPOCHAL_STORE_URI",
        "EPOCHAL_FAULT",
        "EPOCHAL_FAULT_MODE",
        "EPOCHAL_WEED",
    } <= names  # the scan works
    missing = sorted(n for n in names if f"`{n}`" not in CONFIG)
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_every_job_and_checkpoint_config_field_is_documented() -> None:
    job_fields = {f.name for f in dataclasses.fields(Job)}
    chk_fields = {f.name for f in dataclasses.fields(CheckpointConfig)}
    missing = sorted(n for n in job_fields | chk_fields if f"`{n}`" not in CONFIG)
    assert not missing, f"docs/configuration.md does not document the fields {missing}"


def test_every_cli_option_is_documented_in_its_command_row() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    table = CONFIG[CONFIG.index("## Command line") :]
    missing = []
    for name, command in sub.choices.items():
        start = table.find(f"| `{name}")
        assert start >= 0, f"docs/configuration.md has no row for `epochal {name}`"
        rows = table[start:].split("\n| `", 1)[0]  # this command's rows, up to the next command
        for action in command._actions:
            for option in action.option_strings:
                documented = f"`{option}`" in rows or option in ("--help", "--json")  # --json: once for all
                if option.startswith("--") and not documented:
                    missing.append(f"{name} {option}")
    assert not missing, f"docs/configuration.md does not document the options {missing}"


def test_every_failure_reason_has_a_runbook_row() -> None:
    runbook = (ROOT / "docs" / "operations.md").read_text()
    missing = [r.name for r in CheckpointFailureReason if f"| `{r.name}` |" not in runbook]
    assert not missing, f"docs/operations.md has no row for the failure reasons {missing}"
