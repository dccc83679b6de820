"""The one Great Expectations context of the process, and how a list of expectations becomes checks.

Great Expectations is imported lazily, on the first validation (or :func:`warm_up`): the import alone
takes several seconds, and reading a stored :class:`ValidationResult` must not pay for it.

One ephemeral context (``gx.get_context(mode="ephemeral")``: in memory, writes nothing to disk) with
one pandas data source, one DataFrame asset and one whole-frame batch definition is created per
process and reused; every frame is passed as the ``dataframe`` batch parameter. GX 1.24 gives every
batch of that asset the same batch id, so two validations on two threads would overwrite each
other's batch data in the shared execution engine: runs are serialized by a lock.

Results are mapped back to checks through the expectation's ``meta`` (``epochal_index``), never by
position; each expectation is copied before it is bound to a suite, so callers' objects (user
expectations) are never mutated and can be reused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from state_store.validation.result import CheckResult

if TYPE_CHECKING:
    import pandas as pd

EXAMPLES = 3
"""How many example rows a failing check names in its details."""

_RESULT_FORMAT: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
_META_KEY = "epochal_index"
_JSON_COLUMNS = frozenset({"key", "namespace"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one expectation found, in plain Python (no GX objects)."""

    success: bool
    element_count: int
    unexpected_count: int
    partial_values: list[Any]
    partial_counts: list[tuple[Any, int]]
    index: list[Any]
    observed: Any
    error: str | None


Describer = Callable[[Outcome], str]


@dataclass(frozen=True, slots=True)
class Planned:
    """One expectation of a check; ``describe`` turns a failing outcome into short human text."""

    check: str
    expectation: Any  # a great_expectations Expectation (GX ships no precise type for it)
    describe: Describer


@dataclass
class _Engine:
    gx: Any
    context: Any
    batch_definition: Any
    created_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)


_engine: _Engine | None = None
_engine_lock = threading.Lock()


def _get_engine() -> _Engine:
    global _engine
    with _engine_lock:
        if _engine is None:
            started = time.perf_counter()
            import great_expectations as gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            context = gx.get_context(mode="ephemeral")
            # GX draws tqdm progress bars on stderr for every validation: noise in task logs.
            context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
            source = context.data_sources.add_pandas(name="epochal_validation")
            asset = source.add_dataframe_asset(name="frame")
            batch_definition = asset.add_batch_definition_whole_dataframe("whole_frame")
            _engine = _Engine(gx, context, batch_definition, time.perf_counter() - started)
        return _engine


def warm_up() -> float:
    """Import Great Expectations and create the shared context now; return the seconds it took the
    first time (the import dominates: about 4-6 s on a 2-core machine). Later calls are free."""
    return _get_engine().created_s


def coerce_expectation(obj: Any) -> Any:
    """A GX Expectation from an Expectation object or a dict ``{"type": ..., "kwargs": {...}}``.

    Raises ValueError naming the problem for an unknown type or invalid kwargs, TypeError for
    anything else. Use it to check a job's configured expectations before the first epoch.
    """
    _get_engine()
    from great_expectations.expectations.expectation import Expectation
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    if isinstance(obj, Expectation):
        return obj
    if isinstance(obj, Mapping):
        unknown = set(obj) - {"type", "kwargs", "meta", "notes", "description"}
        type_name = obj.get("type")
        kwargs = obj.get("kwargs", {})
        if unknown or not isinstance(type_name, str) or not isinstance(kwargs, Mapping):
            raise ValueError(
                f"expectation {dict(obj)!r} is invalid: use {{'type': 'expect_...', 'kwargs': {{...}}}}"
                + (f" (unknown fields {sorted(unknown)})" if unknown else "")
            )
        try:
            config = ExpectationConfiguration(
                type=type_name, kwargs=dict(kwargs), meta=obj.get("meta"), notes=obj.get("notes")
            )
            return config.to_domain_obj()
        except Exception as exc:  # GX raises its own errors and pydantic ValidationErrors here
            message = " ".join(str(exc).split())
            raise ValueError(f"expectation {type_name!r} is invalid: {message}") from None
    raise TypeError(
        f"an expectation must be a great_expectations Expectation or a dict with 'type' and 'kwargs', "
        f"not {type(obj).__name__}"
    )


def expectation_label(expectation: Any) -> str:
    """``expect_column_values_to_be_between(value)``: the type and the column(s) it looks at."""
    config = expectation.configuration
    kwargs = config.kwargs
    cols = [kwargs[k] for k in ("column", "column_A", "column_B") if isinstance(kwargs.get(k), str)]
    for k in ("column_list",):
        if isinstance(kwargs.get(k), list):
            cols.extend(str(c) for c in kwargs[k])
    return f"{config.type}({', '.join(cols)})"


def _exception_message(info: Any) -> str | None:
    if not isinstance(info, Mapping):
        return None
    if "raised_exception" in info:
        if info.get("raised_exception"):
            return str(info.get("exception_message") or "unknown error")
        return None
    for nested in info.values():  # {metric id: {raised_exception, exception_message, ...}}
        message = _exception_message(nested)
        if message is not None:
            return message
    return None


def _outcome(evr: Any) -> Outcome:
    result: Mapping[str, Any] = evr.result or {}
    error = _exception_message(evr.exception_info)
    counts = [(c.get("value"), int(c.get("count", 0))) for c in result.get("partial_unexpected_counts") or []]
    return Outcome(
        success=bool(evr.success) and error is None,
        element_count=int(result.get("element_count") or 0),
        unexpected_count=int(result.get("unexpected_count") or 0),
        partial_values=list(result.get("partial_unexpected_list") or []),
        partial_counts=counts,
        index=list(result.get("partial_unexpected_index_list") or []),
        observed=result.get("observed_value"),
        error=" ".join(error.split()) if error else None,
    )


def run(frame: pd.DataFrame, planned: Sequence[Planned], suite_name: str) -> list[Outcome]:
    """Validate ``frame`` against every planned expectation in one GX suite; outcomes in plan order."""
    if not planned:
        return []
    engine = _get_engine()
    gx = engine.gx
    bound = [
        p.expectation.copy(
            update={"id": None, "meta": {**(p.expectation.meta or {}), _META_KEY: i}}, deep=True
        )
        for i, p in enumerate(planned)
    ]
    # The constructor (unlike add_expectation) keeps expectations that differ only in meta.
    suite = gx.ExpectationSuite(name=suite_name, expectations=bound)
    with engine.lock:
        batch = engine.batch_definition.get_batch(batch_parameters={"dataframe": frame})
        suite_result = batch.validate(suite, result_format=dict(_RESULT_FORMAT))
    by_index: dict[int, Outcome] = {}
    for evr in suite_result.results:
        meta = evr.expectation_config.meta or {}
        by_index[int(meta[_META_KEY])] = _outcome(evr)
    missing = [planned[i].check for i in range(len(planned)) if i not in by_index]
    if missing:
        raise RuntimeError(f"Great Expectations returned no result for the expectations of checks {missing}")
    return [by_index[i] for i in range(len(planned))]


def to_checks(
    planned: Sequence[Planned], outcomes: Sequence[Outcome], passed_details: Mapping[str, str]
) -> list[CheckResult]:
    """Group outcomes by check name (first-appearance order); a check passes iff all its expectations
    did. ``passed_details[name]`` is the text of a passing check."""
    grouped: dict[str, list[tuple[Planned, Outcome]]] = {}
    for p, o in zip(planned, outcomes, strict=True):
        grouped.setdefault(p.check, []).append((p, o))
    checks = []
    for name, items in grouped.items():
        failed = [(p, o) for p, o in items if not o.success]
        if not failed:
            checks.append(CheckResult(name, True, passed_details.get(name, "ok")))
            continue
        texts = [f"error: {o.error}" if o.error else p.describe(o) for p, o in failed]
        checks.append(CheckResult(name, False, "; ".join(texts), sum(o.unexpected_count for _, o in failed)))
    return checks


# ---------------------------------------------------------------------------------------- describing
def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 row`` / ``2 rows``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def plain(value: Any) -> Any:
    """numpy scalars -> Python scalars (readable reprs in details)."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (str, bytes)):
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value


def fmt_field(column: str, value: Any) -> str:
    value = plain(value)
    if column in _JSON_COLUMNS and isinstance(value, str):
        return f"{column}={value}"  # already JSON text: show it as is
    return f"{column}={value!r}"


def example_rows(frame: pd.DataFrame, outcome: Outcome, columns: Sequence[str], limit: int = EXAMPLES) -> str:
    """``operator='a' key="u1", operator='b' key="u2"`` for the first failing rows GX reported."""
    present = [c for c in columns if c in frame.columns]
    rows = []
    for label in outcome.index[:limit]:
        try:
            row = frame.loc[label]
        except KeyError:
            continue
        rows.append(" ".join(fmt_field(c, row[c]) for c in present))
    return "; ".join(rows)


def generic_describer(label: str) -> Describer:
    """Details for an expectation Epochal knows nothing about (user expectations)."""

    def describe(o: Outcome) -> str:
        if o.partial_values or o.unexpected_count:
            examples = ", ".join(repr(plain(v)) for v in o.partial_values[:EXAMPLES])
            rows = count(o.element_count, "row")
            return f"{label}: {o.unexpected_count} of {rows} unexpected, e.g. {examples}"
        if o.observed is not None:
            return f"{label}: observed {plain(o.observed)!r}"
        return f"{label}: failed"

    return describe
