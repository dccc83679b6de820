"""Review of issue 19: the history reports a checkpoint whose ``_decision.json`` is damaged as
``completed``.

Before issue 19 ``state_store.core.history.checkpoint_history`` read the pending record, the
decision and the metadata of every checkpoint, and one that could not be read was ``unreadable``
with the reason -- the operator's pointer to the damage. The new read model
(``history.summarize``) skips the decision whenever ``_metadata.json`` exists, so ``epochal
checkpoints list`` (and the Airflow trigger/sensor, which now read the same summary) call the
checkpoint ``completed`` -- while the next epoch refuses to continue from it because that very
decision fails its checksum. It also breaks the module's own invariant ("UNREADABLE iff a document
cannot be read").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.review19.support import RUN, epochal


def test_a_damaged_decision_is_reported_unreadable_not_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "2", *RUN)
    assert code == 0, err
    decision = tmp_path / "store" / "clickstream" / "checkpoints" / "chk-0000000002" / "_decision.json"
    data = bytearray(decision.read_bytes())
    at = data.index(b'"decided_ms"') + len(b'"decided_ms": ')
    data[at] = ord("9") if data[at] != ord("9") else ord("8")  # one digit of the body: checksum fails
    decision.write_bytes(bytes(data))
    # the job itself refuses the damaged checkpoint (before and after issue 19) ...
    code, _, err = epochal(capsys, "run", "--job", "clickstream", "--store", store, "--epochs", "1", *RUN)
    assert code == 1 and "_decision.json' fails its checksum" in err, err
    # ... so the history must not call it completed
    code, out, err = epochal(
        capsys, "checkpoints", "list", "--job", "clickstream", "--store", store, "--json"
    )
    assert code == 0, err
    row = next(r for r in json.loads(out) if r["checkpoint_id"] == 2)
    assert row["status"] == "unreadable" and "_decision.json" in row["reason"], row
