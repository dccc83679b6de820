"""Find a job by name: an example (``clickstream``) or ``package.module:attr`` where ``attr`` is a
``Job`` or a function returning one."""

from __future__ import annotations

import importlib
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.examples import NAMED_JOBS, example_factory
from state_store.core.errors import BadInputError


class JobNotFoundError(ValueError, BadInputError):
    """The job reference names nothing runnable; the message says what to write."""


def load_job(reference: str, **options: Any) -> Job:
    if reference in NAMED_JOBS:
        job = example_factory(reference)(**options)
    elif ":" in reference:
        module_name, _, attr = reference.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise JobNotFoundError(
                f"job {reference!r} cannot be loaded ({exc}): use module:attr or an example name "
                f"({', '.join(sorted(NAMED_JOBS))})"
            ) from None
        job = target(**options) if callable(target) and not isinstance(target, Job) else target
    else:
        raise JobNotFoundError(
            f"job {reference!r} is neither an example ({', '.join(sorted(NAMED_JOBS))}) nor module:attr"
        )
    if not isinstance(job, Job):
        raise JobNotFoundError(f"job {reference!r} is a {type(job).__name__}, not an epochal Job")
    job.graph.stages()  # validates the pipeline: a clear error now rather than inside Spark
    return job
