"""Errors of the prefix source (:mod:`spark_jobs.sources.prefix`); each is one line that names the
file and says what to do."""

from __future__ import annotations

from spark_jobs.sources.errors import SourceError


class PrefixSourceError(SourceError):
    """Base class of the prefix source's errors; ``path`` names the landing-zone file ('' if none)."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class UnreadableFileError(PrefixSourceError):
    """A landing-zone file that cannot be decoded in the source's format (found at admission; nothing
    of the round that found it was admitted)."""


class FileMissingError(PrefixSourceError):
    """A file admitted to the manifest was deleted before (or after) its offsets were read."""


class FileChangedError(PrefixSourceError):
    """A file admitted to the manifest now has other content: its offsets no longer mean its records."""


class SourceDefinitionChangedError(PrefixSourceError):
    """The source was started with another format, prefix or partitioning than it is opened with."""
