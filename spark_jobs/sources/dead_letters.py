"""Dead letters: malformed input records set aside so an epoch can continue without them.

A record is malformed when it cannot become a row of the source schema: a line that is not JSON or
not a JSON object, a required (non-nullable) field that is missing or null, or a value whose type
cannot be cast safely to the field's type (``"abc"`` or ``1.5`` for an int64 field).

Invariants
----------
* A malformed record **still consumes its offset**. The epoch's position moves past it, so after
  recovery the replay of the same range skips the same offset and reports the same dead letter.
* One dead letter per malformed record (its first problem, fields checked in schema order), so
  ``sum(counts.values())`` is the number of malformed records, never more.
* Collectors are plain values owned by the caller of ``read``: one per epoch and subtask, written
  next to the epoch's output (``to_table``/``to_ndjson``) and discarded if the epoch is retried.
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa


class DeadLetterReason(enum.Enum):
    """Why a record was set aside."""

    INVALID_JSON = "invalid_json"
    """The line is not valid JSON (includes empty lines and invalid UTF-8)."""
    NOT_AN_OBJECT = "not_an_object"
    """The line is valid JSON but not an object (``[1]``, ``"x"``, ``3``)."""
    MISSING_FIELD = "missing_field"
    """A required (non-nullable) field is absent or null."""
    BAD_TYPE = "bad_type"
    """A value cannot be cast safely to its field's type."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One malformed record: where it was (source, partition, offset), why, and its raw text."""

    source: str
    partition: str
    offset: int
    reason: DeadLetterReason
    detail: str
    raw: str


DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
    ]
)
"""Schema of :meth:`DeadLetters.to_table`."""


@dataclass(slots=True)
class DeadLetters:
    """Collects dead letters and counts them per reason.

    ``max_kept`` bounds memory for a flood of bad input: past it, letters are only counted
    (``counts`` and ``total`` stay exact; ``dropped`` says how many were not kept).
    """

    max_kept: int | None = None
    letters: list[DeadLetter] = field(default_factory=list)
    counts: Counter[DeadLetterReason] = field(default_factory=Counter)
    dropped: int = 0

    def add(self, letter: DeadLetter) -> None:
        """Record one malformed record."""
        self.counts[letter.reason] += 1
        if self.max_kept is not None and len(self.letters) >= self.max_kept:
            self.dropped += 1
        else:
            self.letters.append(letter)

    def extend(self, letters: Iterable[DeadLetter]) -> None:
        for letter in letters:
            self.add(letter)

    @property
    def total(self) -> int:
        """Number of malformed records seen (kept or not)."""
        return sum(self.counts.values())

    def count(self, reason: DeadLetterReason) -> int:
        return self.counts[reason]

    def offsets(self, partition: str) -> list[int]:
        """Offsets of the kept letters of one partition, in the order they were read."""
        return [letter.offset for letter in self.letters if letter.partition == partition]

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(self.letters)

    def __len__(self) -> int:
        return len(self.letters)

    def to_table(self) -> pa.Table:
        """The kept letters as an Arrow table with :data:`DEAD_LETTER_SCHEMA`."""
        columns = {
            "source": [x.source for x in self.letters],
            "partition": [x.partition for x in self.letters],
            "offset": [x.offset for x in self.letters],
            "reason": [x.reason.value for x in self.letters],
            "detail": [x.detail for x in self.letters],
            "raw": [x.raw for x in self.letters],
        }
        return pa.Table.from_pydict(columns, schema=DEAD_LETTER_SCHEMA)

    def to_ndjson(self) -> bytes:
        """The kept letters as NDJSON, one object per line (a human-readable dead-letter file)."""
        lines = [
            json.dumps(
                {
                    "source": x.source,
                    "partition": x.partition,
                    "offset": x.offset,
                    "reason": x.reason.value,
                    "detail": x.detail,
                    "raw": x.raw,
                },
                ensure_ascii=False,
            )
            for x in self.letters
        ]
        return "".join(line + "\n" for line in lines).encode()
