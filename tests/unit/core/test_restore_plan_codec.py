"""A restore plan's JSON goes through the codec (``to_jsonable`` / ``from_jsonable``): a plan
written by the hand-written encoder of ``state_store/core/restore_plan.py`` (before issue 19) is
still read, the same plan is written again byte for byte, and a bad document is refused with one
line naming the problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from state_store.core.codec import ManifestError, UnsupportedFormatVersion
from state_store.core.restore import RestorePlan, plan_from_json
from tests.unit.core.test_restore_plan import messy_plan

# json.dumps(messy_plan().to_json(), indent=1) as the old code wrote it (captured before the
# change): refusals, a uid_map rename (counter -> counter_v2), a rescale 4 -> 2 with key groups.
OLD_PLAN_JSON = """{
 "format_version": 1,
 "ok": false,
 "job_id": "orders",
 "max_parallelism": 128,
 "snapshot": {
  "job_id": "orders",
  "kind": "savepoint",
  "checkpoint_id": 12,
  "location": "mem://orders/savepoints/sp-1",
  "max_parallelism": 128
 },
 "claim_mode": "CLAIM",
 "claim_mode_meaning": "the job takes ownership of the snapshot's files: later checkpoints may share them and retention may delete them once they are no longer referenced",
 "allow_non_restored_state": false,
 "operators": [
  {
   "uid": "src",
   "old_uid": "src",
   "action": "rescale",
   "old_parallelism": 4,
   "new_parallelism": 2,
   "states": [
    "offsets"
   ],
   "new_states": [],
   "dropped_states": [],
   "subtasks": [],
   "notes": [
    "operator state 'offsets' (split-distribute, Flink round-robin): the lists of the 4 old subtasks are concatenated in subtask order and cut into 2 contiguous chunks, the first (total % 2) one element longer"
   ],
   "refusals": []
  },
  {
   "uid": "counter_v2",
   "old_uid": "counter",
   "action": "rescale",
   "old_parallelism": 4,
   "new_parallelism": 2,
   "states": [
    "count"
   ],
   "new_states": [],
   "dropped_states": [
    "seen"
   ],
   "subtasks": [
    {
     "subtask": 0,
     "key_groups": [
      0,
      63
     ],
     "old_subtasks": [
      0,
      1
     ]
    },
    {
     "subtask": 1,
     "key_groups": [
      64,
      127
     ],
     "old_subtasks": [
      2,
      3
     ]
    }
   ],
   "notes": [
    "restores from snapshot uid 'counter' (uid_map)",
    "keyed state rescaled 4 -> 2 by key group"
   ],
   "refusals": [
    "operator 'counter_v2': state 'seen' (map) is in the snapshot but not registered by the new operator; register it or pass allow_non_restored_state to drop it"
   ]
  },
  {
   "uid": "dedup",
   "old_uid": null,
   "action": "new",
   "old_parallelism": null,
   "new_parallelism": 2,
   "states": [],
   "new_states": [
    "ids"
   ],
   "dropped_states": [],
   "subtasks": [],
   "notes": [
    "not in the snapshot; starts empty"
   ],
   "refusals": []
  },
  {
   "uid": "map",
   "old_uid": null,
   "action": "stateless",
   "old_parallelism": null,
   "new_parallelism": 2,
   "states": [],
   "new_states": [],
   "dropped_states": [],
   "subtasks": [],
   "notes": [],
   "refusals": []
  },
  {
   "uid": "legacy",
   "old_uid": "legacy",
   "action": "dropped",
   "old_parallelism": 4,
   "new_parallelism": null,
   "states": [],
   "new_states": [],
   "dropped_states": [
    "x"
   ],
   "subtasks": [],
   "notes": [],
   "refusals": [
    "operator 'legacy' of the snapshot has state 'x' that no operator of the job takes; map its uid with uid_map or pass allow_non_restored_state to drop it"
   ]
  },
  {
   "uid": "filter",
   "old_uid": "filter",
   "action": "removed",
   "old_parallelism": 4,
   "new_parallelism": null,
   "states": [],
   "new_states": [],
   "dropped_states": [],
   "subtasks": [],
   "notes": [
    "no state in the snapshot; nothing lost"
   ],
   "refusals": []
  }
 ],
 "refusals": [
  "operator 'counter_v2': state 'seen' (map) is in the snapshot but not registered by the new operator; register it or pass allow_non_restored_state to drop it",
  "operator 'legacy' of the snapshot has state 'x' that no operator of the job takes; map its uid with uid_map or pass allow_non_restored_state to drop it"
 ],
 "notes": []
}"""  # noqa: E501


def old_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(OLD_PLAN_JSON)
    return doc


def test_plan_written_by_the_old_code_is_still_read() -> None:
    plan = plan_from_json(old_doc())
    assert plan == messy_plan()
    assert not plan.ok and len(plan.refusals) == 2
    renamed = plan.row("counter_v2")
    assert (renamed.old_uid, renamed.action, renamed.old_parallelism, renamed.new_parallelism) == (
        "counter",
        "rescale",
        4,
        2,
    )
    assert [(a.key_groups, a.old_subtasks) for a in renamed.subtasks] == [
        ((0, 63), (0, 1)),
        ((64, 127), (2, 3)),
    ]
    assert (plan.snapshot.kind, plan.snapshot.checkpoint_id, plan.claim_mode) == ("savepoint", 12, "CLAIM")


def test_plan_is_written_as_the_old_code_wrote_it() -> None:
    assert json.dumps(messy_plan().to_json(), indent=1) == OLD_PLAN_JSON


def test_claim_mode_meaning_is_written_for_readers_and_derived_on_read() -> None:
    doc = old_doc()
    doc["claim_mode_meaning"] = "reworded by a later Epochal"
    assert plan_from_json(doc) == messy_plan()


def test_newer_format_version_is_refused_with_upgrade_advice() -> None:
    doc = old_doc()
    doc["format_version"] = 2
    with pytest.raises(UnsupportedFormatVersion, match=r"format_version 2, newer .* upgrade Epochal"):
        plan_from_json(doc)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path
        target: Any = doc
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path
        target: Any = doc
        for key in parents:
            target = target[key]
        del target[last]

    return edit


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_set(("format_version",), 0), "format_version 0 is not a version"),
        (_set(("format_version",), "1"), "expected int, got '1'"),
        (_drop(("operators", 0, "action")), "missing field 'action'"),
        (_set(("operators", 0, "action"), "teleport"), "operator 'src': action must be one of"),
        (_set(("claim_mode",), "MAYBE"), "claim mode must be one of CLAIM, NO_CLAIM, got 'MAYBE'"),
        (_set(("ok",), True), "'ok' is true but it has 2 refusals"),
        (_set(("operators", 1, "subtasks", 0, "key_groups"), [0]), "key_groups must be [first, last]"),
        (_set(("operators", 1, "subtasks", 0, "key_groups"), [63, 0]), "invalid key group range 63..0"),
        (_set(("snapshot", "checkpoint_id"), "12"), "expected int, got '12'"),
        (_set(("refusals",), "none"), "expected a list, got str"),
    ],
)
def test_bad_plan_document_is_refused_with_one_line(
    edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    doc = old_doc()
    edit(doc)
    with pytest.raises(ManifestError) as err:
        plan_from_json(doc)
    message = str(err.value)
    assert message.startswith("restore plan is invalid (") and problem in message
    assert "do not edit" in message and "\n" not in message


@pytest.mark.parametrize("value", [[], None, "plan"])
def test_a_non_object_is_not_a_plan(value: Any) -> None:
    with pytest.raises(ManifestError, match="restore plan is invalid"):
        plan_from_json(value)


def test_reading_does_not_alias_the_document() -> None:
    doc = old_doc()
    plan = plan_from_json(doc)
    doc["operators"][1]["states"].append("mutated")
    assert isinstance(plan, RestorePlan) and plan.row("counter_v2").states == ("count",)
