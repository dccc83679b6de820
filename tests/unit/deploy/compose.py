"""Helpers to read docker-compose.yml as Compose does: YAML plus ``${...}`` interpolation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:-|:\?)([^}]*))?\}")


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def env_example() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f".env.example line {line!r} is not KEY=VALUE")
            values[key.strip()] = value.strip()
    return values


def referenced_variables(text: str) -> set[str]:
    return {m.group(1) for m in _VAR.finditer(text) if m.group(1)}


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation: ``$$`` -> ``$``, ``${V}``, ``${V:-default}``, ``${V:?error}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.groups()
        current = env.get(name, "")
        if op == ":?" and not current:
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        if op == ":-" and not current:
            return arg
        return current

    return _VAR.sub(one, value)
