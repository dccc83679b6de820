"""Errors of the ``epochal`` command line (the exit code comes from ``state_store.core.errors``)."""

from __future__ import annotations

from state_store.core.errors import BadInputError, EpochalError


class UsageError(BadInputError):
    """Bad input from the user: printed as one line, exit code 2."""


class AuditFailedError(EpochalError):
    """``epochal validate`` found a damaged checkpoint (exit 1; each finding names file and remedy)."""
