"""The storage layout of one job (DESIGN.md section 4): every object key the protocol uses.

::

    <job_id>/_job.json                           generation, lease + fencing token, chain head, parallelism
    <job_id>/_stopped.json                       stopped with a savepoint (until a restore)
    <job_id>/LATEST
    <job_id>/checkpoints/chk-<n:010d>/_pending.json
                                     /attempts/<a:06d>.json
                                     /acks/<uid>/<subtask:05d>-g<gen>-a<attempt>.json
                                     /ack-bundles/g<gen>-a<attempt>-<token>.json  (read cache)
                                     /declines/<uid>/<subtask:05d>-g<gen>-a<attempt>.json
                                     /state/<uid>/kg-<first>-<last>.<fmt>
                                     /channel/<uid>/<subtask>.<fmt>
                                     /_metadata.json      (the completed checkpoint, create-only)
                                     /_decision.json      (commit or abort, create-only, once)
                                     /_quarantined.json   (failed audit validation)
    <job_id>/shared/<uid>/<content-hash>.<fmt>
    <job_id>/pins/<n:010d>.json                  keeps checkpoint n from retention
    <job_id>/savepoints/<name>/_metadata.json
    <job_id>/sinks/<sink_uid>/txn-<n:010d>/...
    <job_id>/history/seg-<first:08d>-<last:08d>.json   monitoring's checkpoint history archive
                                                       (state_store.monitoring.archive)

Acks and declines carry generation and attempt in their name (DESIGN had ``<subtask>.json``):
a zombie (older attempt or generation) and its successor must both be able to write, each is then
classified by the coordinator; with one create-only name per subtask the zombie could block the
successor's ack, and with an overwritable one it could replace it.

An epoch run's driver also writes the acks its tasks wrote as one ``ack-bundles/`` document (not
in DESIGN): the coordinator then reads one object instead of one per subtask, and an entry counts
only while the store reports the same version for its ack (``state_store.core.ack_bundles``).

The commit point of a checkpoint is the fenced compare-and-swap of ``_job.json`` that makes it the
chain head (DESIGN had ``_metadata.json``): only one document can check the writer's lease token
and the chain in one atomic step (``state_store.core.jobrecord``). ``_decision.json`` and
``_metadata.json`` follow it and are rolled forward from the job record after a crash.

Completion and abort race for one key, ``_decision.json`` (DESIGN had a separate
``_aborted.json``): two coordinators racing on checkpoint n could otherwise write both an abort
record and ``_metadata.json``, and one would abort sink transactions the other commits. The
decision is create-only, so exactly one outcome exists; ``_metadata.json`` follows a COMPLETE
decision and remains the mark of a completed checkpoint.

Names (job ids, uids, savepoint names) are validated so no key can escape the job root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from state_store.core.errors import BadInputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_CHK = re.compile(r"/checkpoints/chk-(\d{10})/")
_FMT = re.compile(r"^[a-z0-9]{1,16}$")
_HASH = re.compile(r"^[0-9a-f]{16,64}$")


class InvalidNameError(ValueError, BadInputError):
    """A job id, operator uid or savepoint name that is not a safe path segment."""


def validate_name(kind: str, value: str) -> str:
    """Return ``value`` if it is 1-128 of ``[A-Za-z0-9_.-]`` starting with a letter/digit and
    without '..'; else raise InvalidNameError naming the kind and the rule."""
    if not isinstance(value, str) or not _NAME.match(value) or ".." in value:
        raise InvalidNameError(
            f"{kind} {value!r} is invalid: use 1-128 letters, digits, '_', '-' or '.', starting "
            "with a letter or digit (no '/', no '..')"
        )
    return value


def _fmt(fmt: str) -> str:
    if not _FMT.match(fmt):
        raise InvalidNameError(f"file format {fmt!r} is invalid: use a short lowercase extension")
    return fmt


@dataclass(frozen=True, slots=True)
class JobLayout:
    """Keys of one job under the store root. All methods are pure string functions."""

    job_id: str

    def __post_init__(self) -> None:
        validate_name("job id", self.job_id)

    @property
    def root(self) -> str:
        return self.job_id + "/"

    @property
    def job_record(self) -> str:
        return f"{self.job_id}/_job.json"

    @property
    def stopped(self) -> str:
        """Present while the job is stopped with a savepoint (``StoppedRecord``)."""
        return f"{self.job_id}/_stopped.json"

    @property
    def latest(self) -> str:
        return f"{self.job_id}/LATEST"

    @property
    def checkpoints_prefix(self) -> str:
        return f"{self.job_id}/checkpoints/"

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        if checkpoint_id < 1 or checkpoint_id >= 10**10:
            raise ValueError(f"checkpoint id {checkpoint_id} is out of range 1..9999999999")
        return f"{self.job_id}/checkpoints/chk-{checkpoint_id:010d}/"

    def pending(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "_pending.json"

    def metadata(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "_metadata.json"

    def decision(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "_decision.json"

    def quarantined(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "_quarantined.json"

    def attempts_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "attempts/"

    def attempt(self, checkpoint_id: int, attempt: int) -> str:
        return f"{self.attempts_prefix(checkpoint_id)}{attempt:06d}.json"

    def acks_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "acks/"

    def ack(self, checkpoint_id: int, uid: str, subtask: int, attempt: int, generation: int) -> str:
        validate_name("operator uid", uid)
        return f"{self.acks_prefix(checkpoint_id)}{uid}/{subtask:05d}-g{generation}-a{attempt}.json"

    def ack_bundles_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "ack-bundles/"

    def ack_bundle(self, checkpoint_id: int, generation: int, attempt: int, token: str) -> str:
        validate_name("ack bundle token", token)
        return f"{self.ack_bundles_prefix(checkpoint_id)}g{generation}-a{attempt}-{token}.json"

    def declines_prefix(self, checkpoint_id: int) -> str:
        return self.checkpoint_dir(checkpoint_id) + "declines/"

    def decline(self, checkpoint_id: int, uid: str, subtask: int, attempt: int, generation: int) -> str:
        validate_name("operator uid", uid)
        return f"{self.declines_prefix(checkpoint_id)}{uid}/{subtask:05d}-g{generation}-a{attempt}.json"

    def state_file(self, checkpoint_id: int, uid: str, first_kg: int, last_kg: int, fmt: str) -> str:
        validate_name("operator uid", uid)
        return f"{self.checkpoint_dir(checkpoint_id)}state/{uid}/kg-{first_kg}-{last_kg}.{_fmt(fmt)}"

    def channel_file(self, checkpoint_id: int, uid: str, subtask: int, fmt: str) -> str:
        validate_name("operator uid", uid)
        return f"{self.checkpoint_dir(checkpoint_id)}channel/{uid}/{subtask}.{_fmt(fmt)}"

    @property
    def shared_prefix(self) -> str:
        return f"{self.job_id}/shared/"

    def shared_file(self, uid: str, content_hash: str, fmt: str) -> str:
        validate_name("operator uid", uid)
        if not _HASH.match(content_hash):
            raise InvalidNameError(
                f"content hash {content_hash!r} is invalid: use 16-64 lowercase hex digits"
            )
        return f"{self.shared_prefix}{uid}/{content_hash}.{_fmt(fmt)}"

    @property
    def pins_prefix(self) -> str:
        return f"{self.job_id}/pins/"

    def pin(self, checkpoint_id: int) -> str:
        """A marker that keeps checkpoint n from retention (restored with NO_CLAIM, or pinned by hand)."""
        return f"{self.pins_prefix}{checkpoint_id:010d}.json"

    def pinned_id_of(self, key: str) -> int | None:
        name = key[len(self.pins_prefix) :] if key.startswith(self.pins_prefix) else ""
        stem = name.removesuffix(".json")
        return int(stem) if stem.isdigit() and name.endswith(".json") else None

    @property
    def savepoints_prefix(self) -> str:
        return f"{self.job_id}/savepoints/"

    def savepoint_dir(self, name: str) -> str:
        return f"{self.savepoints_prefix}{validate_name('savepoint name', name)}/"

    def savepoint_metadata(self, name: str) -> str:
        return self.savepoint_dir(name) + "_metadata.json"

    def sink_txn_dir(self, sink_uid: str, checkpoint_id: int) -> str:
        validate_name("sink uid", sink_uid)
        return f"{self.job_id}/sinks/{sink_uid}/txn-{checkpoint_id:010d}/"

    @property
    def history_prefix(self) -> str:
        """The checkpoint history archive (``state_store.monitoring.archive``); never read by the protocol."""
        return f"{self.job_id}/history/"

    def history_segment(self, first_seq: int, last_seq: int) -> str:
        """The immutable archive segment holding the rows of archive writes ``first_seq..last_seq``."""
        if not 1 <= first_seq <= last_seq < 10**8:
            raise ValueError(f"history segment {first_seq}-{last_seq} is out of range 1..99999999")
        return f"{self.history_prefix}seg-{first_seq:08d}-{last_seq:08d}.json"

    def checkpoint_id_of(self, key: str) -> int | None:
        """The checkpoint id of a key inside ``checkpoints/chk-<n>/``, else None."""
        if not key.startswith(self.checkpoints_prefix):
            return None
        m = _CHK.search(key, len(self.job_id))
        return int(m.group(1)) if m else None
