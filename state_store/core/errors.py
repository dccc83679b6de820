"""The root of the errors Epochal reports to a user: one line that names the thing and the remedy,
and the exit code the CLI returns for it (never a traceback).

* :class:`EpochalError` -- exit 1: refused, failed, or damaged stored data (a checksum, an
  unreadable document, a held lease, an unreachable store).
* :class:`BadInputError` -- exit 2: bad usage or input (a malformed URI, name, fault spec, job
  reference, snapshot location, or argument).

Errors that were ``ValueError``/``RuntimeError`` stay so (their ``except`` clauses still catch them);
the tree only adds what the user sees.
"""

from __future__ import annotations

from typing import ClassVar


class EpochalError(Exception):
    """Refused, failed, or damaged input: the CLI prints the message and exits 1."""

    exit_code: ClassVar[int] = 1


class BadInputError(EpochalError):
    """Bad usage or input: the CLI prints the message and exits 2."""

    exit_code: ClassVar[int] = 2
