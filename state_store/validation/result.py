"""The plain outcome of a validation run, independent of Great Expectations.

A :class:`ValidationResult` is what the rest of Epochal sees: the coordinator's gate, the audit
quarantine, the CLI (``epochal validate``) and the Airflow task log. It never holds a GX object, so
reading a stored result does not import Great Expectations (whose import alone takes seconds).

Stored form: the checksummed document envelope every Epochal document uses
(``state_store.core.codec``)::

    {"format_version": 1, "kind": "validation_result", "sha256": "...",
     "body": {"passed": false, "suite": "snapshot",
              "checks": [{"name": "keys_unique", "passed": false, "unexpected_count": 2,
                          "details": "2 rows with duplicate keys, e.g. ..."}, ...]}}

:meth:`ValidationResult.to_json` returns exactly that text and :meth:`ValidationResult.from_json`
verifies it (a torn, altered or newer-format document raises
:class:`~state_store.core.codec.ManifestError` / ``UnsupportedFormatVersion``).
"""

from __future__ import annotations

from dataclasses import dataclass

from state_store.core.codec import decode_document, encode_document
from state_store.core.ports import ObjectStore

KIND = "validation_result"
"""The ``kind`` of the stored document."""

_MAX_SUMMARY_DETAILS = 160


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One named check of a suite.

    ``details`` is short human text naming what is wrong (or what was checked when it passed), e.g.
    ``"2 rows with duplicate keys, e.g. operator='counts' state='n' namespace=null key=\\"u1\\" (x2)"``.
    ``unexpected_count`` is the number of offending rows or entries (0 when the check passed).
    """

    name: str
    passed: bool
    details: str
    unexpected_count: int = 0

    def line(self) -> str:
        return f"{'ok' if self.passed else 'FAILED'} {self.name}: {self.details}"


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """Outcome of one suite: ``passed`` is true iff every check passed (checked on construction)."""

    passed: bool
    suite: str
    checks: tuple[CheckResult, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.checks, tuple):
            object.__setattr__(self, "checks", tuple(self.checks))
        expected = all(c.passed for c in self.checks)
        if self.passed != expected:
            raise ValueError(
                f"inconsistent ValidationResult for suite {self.suite!r}: passed={self.passed} but "
                f"{'every' if expected else 'not every'} check passed"
            )

    @classmethod
    def of(cls, suite: str, checks: list[CheckResult] | tuple[CheckResult, ...]) -> ValidationResult:
        """Build a result whose ``passed`` is derived from the checks."""
        return cls(passed=all(c.passed for c in checks), suite=suite, checks=tuple(checks))

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The checks that failed, in suite order."""
        return tuple(c for c in self.checks if not c.passed)

    def check(self, name: str) -> CheckResult:
        """The check called ``name``; KeyError naming the checks there are."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"suite {self.suite!r} has no check {name!r}; checks: {[c.name for c in self.checks]}")

    def summary_line(self) -> str:
        """One line for a task log, e.g. ``validation snapshot: FAILED 2 of 6 checks (keys_unique: ...)``."""
        total = len(self.checks)
        if self.passed:
            return f"validation {self.suite}: passed {total} of {total} checks"
        failed = self.failures
        parts = []
        for c in failed:
            details = c.details
            if len(details) > _MAX_SUMMARY_DETAILS:
                details = details[: _MAX_SUMMARY_DETAILS - 3] + "..."
            parts.append(f"{c.name}: {details}")
        return f"validation {self.suite}: FAILED {len(failed)} of {total} checks ({'; '.join(parts)})"

    def report(self) -> str:
        """Multi-line text: the summary line, then one line per check."""
        return "\n".join([self.summary_line(), *("  " + c.line() for c in self.checks)])

    def to_json(self) -> str:
        """The versioned, checksummed JSON document (see the module docstring)."""
        return encode_document(KIND, self).decode("utf-8")

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "<validation result>") -> ValidationResult:
        """Parse and verify :meth:`to_json` output; ManifestError names ``source`` if it is invalid."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        return decode_document(data, KIND, cls, key=source)


def save_result(store: ObjectStore, key: str, result: ValidationResult) -> str:
    """Write ``result`` under ``key`` (replacing a previous result: a re-run audit overwrites); return the
    object version."""
    return store.put(key, result.to_json().encode("utf-8"))


def load_result(store: ObjectStore, key: str) -> ValidationResult:
    """Read and verify the result under ``key``; ObjectNotFound if missing, ManifestError if corrupt."""
    return ValidationResult.from_json(store.get(key).data, source=key)
