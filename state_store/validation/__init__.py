"""Great Expectations adapter: validate snapshots and sink output, return a plain ValidationResult.

Great Expectations is imported on the first validation (one ephemeral context per process, reused);
importing this package and reading stored results does not import it. Call :func:`warm_up` early in
a long-lived process to pay the import (several seconds) before the first gate.
"""

from state_store.validation._engine import coerce_expectation, warm_up
from state_store.validation.result import CheckResult, ValidationResult, load_result, save_result
from state_store.validation.sink import validate_sink_output
from state_store.validation.snapshot import (
    SINGLE_VALUED_KINDS,
    STATE_COLUMNS,
    STATE_KINDS,
    TIMER_COLUMNS,
    check_positions,
    validate_snapshot,
)

__all__ = [
    "SINGLE_VALUED_KINDS",
    "STATE_COLUMNS",
    "STATE_KINDS",
    "TIMER_COLUMNS",
    "CheckResult",
    "ValidationResult",
    "check_positions",
    "coerce_expectation",
    "load_result",
    "save_result",
    "validate_sink_output",
    "validate_snapshot",
    "warm_up",
]
