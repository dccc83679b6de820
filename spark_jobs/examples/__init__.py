"""Example jobs, discoverable by name: ``epochal run --job clickstream``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the examples Airflow schedules, and the Checkpoints view shows, when ``EPOCHAL_JOBS`` is unset
EXAMPLES: dict[str, str] = {"clickstream": "spark_jobs.examples.clickstream:build_job"}

#: every example known by a short name (``epochal run --job <name>``, ``EPOCHAL_JOBS``): short name ->
#: ``module:attr``, each name also the job id it runs under. ``keyed-counts`` (100,000 keys; benchmarks
#: of incremental checkpoints) runs only when asked for.
NAMED_JOBS: dict[str, str] = {
    **EXAMPLES,
    "keyed-counts": "spark_jobs.examples.keyed_counts:build_job",
}


def example_factory(name: str) -> Callable[..., Any]:
    import importlib

    if name not in NAMED_JOBS:
        raise KeyError(f"example job {name!r} does not exist: use one of {', '.join(sorted(NAMED_JOBS))}")
    module, _, attr = NAMED_JOBS[name].partition(":")
    factory: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return factory
