"""The stream core is pure: standard library only, and it never reads a clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import state_store.core.stream as stream

PACKAGE = Path(stream.__file__).parent


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_stream_core_imports_only_the_standard_library_and_itself() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        foreign = {
            root
            for root in imported_roots(path)
            if root not in sys.stdlib_module_names and root != "state_store"
        }
        assert not foreign, f"{path.name} imports {sorted(foreign)}"


def test_stream_core_never_reads_a_clock() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        roots = imported_roots(path)
        assert not roots & {"time", "datetime"}, f"{path.name} imports a clock module; inject time instead"


def test_every_public_name_is_exported() -> None:
    assert sorted(stream.__all__) == sorted(set(stream.__all__))
    for name in stream.__all__:
        assert hasattr(stream, name), name
