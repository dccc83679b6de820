"""DESIGN section 2: ``state_store.core`` imports nothing outside the standard library.

import-linter checks the known third-party packages; this test checks every import statement of
every core module against ``sys.stdlib_module_names``, so a new dependency cannot slip in.
"""

from __future__ import annotations

import ast
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
