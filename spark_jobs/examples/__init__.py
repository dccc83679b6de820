"""Example jobs, discoverable by name: ``epochal run --job clickstream``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EXAMPLES: dict[str, str] = {"clickstream": "spark_jobs.examples.clickstream:build_job"}


def example_factory(name: str) -> Callable[..., Any]:
    import importlib

    if name not in EXAMPLES:
        raise KeyError(f"example job {name!r} does not exist: use one of {', '.join(sorted(EXAMPLES))}")
    module, _, attr = EXAMPLES[name].partition(":")
    factory: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return factory
