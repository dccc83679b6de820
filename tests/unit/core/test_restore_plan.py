"""Restore planning (Flink savepoint restore rules): uid matching, rescaling, compatibility, refusals;
the plan's JSON (through the codec) and its table (``spark_jobs.lifecycle.restore_render``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.lifecycle.restore_render import render_plan
from state_store.core.codec import ManifestError, from_jsonable, to_jsonable
from state_store.core.keygroups import subtask_for_key_group
from state_store.core.restore import (
    CLAIM_MODES,
    FieldType,
    JobShape,
    OperatorShape,
    RestoreOptions,
    RestorePlan,
    RestorePlanError,
    SnapshotShape,
    key_group_assignment,
    plan_from_json,
    plan_restore,
)

MAX_P = 128


def op(uid: str, p: int = 4, states: dict[str, str] | None = None, **kw: Any) -> OperatorShape:
    states = {} if states is None else states
    keyed = kw.pop("keyed", any(k not in ("operator_list", "union_list") for k in states.values()))
    return OperatorShape(uid, kw.pop("stateful", bool(states)), keyed, p, states, **kw)


def job(*ops: OperatorShape, job_id: str = "orders", max_p: int = MAX_P) -> JobShape:
    return JobShape(job_id, max_p, ops)


def snap(*ops: OperatorShape, job_id: str = "orders", max_p: int = MAX_P) -> SnapshotShape:
    return SnapshotShape(job_id, max_p, "savepoint", 12, "mem://orders/savepoints/sp-1", ops)


def plan(j: JobShape, s: SnapshotShape, **options: Any) -> RestorePlan:
    return plan_restore(j, s, RestoreOptions(**options))


def refused_with(p: RestorePlan, *words: str) -> str:
    """The single refusal mentioning every word."""
    hits = [r for r in p.refusals if all(w in r for w in words)]
    assert len(hits) == 1, (words, p.refusals)
    assert "\n" not in hits[0]
    return hits[0]


COUNTER = {"count": "value", "seen": "map"}


def test_identical_job_restores_every_operator() -> None:
    p = plan(
        job(op("src", 2, {"offsets": "operator_list"}), op("counter", 4, COUNTER)),
        snap(op("src", 2, {"offsets": "operator_list"}), op("counter", 4, COUNTER)),
    )
    assert p.ok and p.refusals == ()
    assert [(r.uid, r.old_uid, r.action) for r in p.rows] == [
        ("src", "src", "restore"),
        ("counter", "counter", "restore"),
    ]
    assert p.row("counter").states == ("count", "seen")
    assert [a.old_subtasks for a in p.row("counter").subtasks] == [(0,), (1,), (2,), (3,)]
    p.raise_if_refused()


def test_renamed_uid_restores_only_with_a_mapping() -> None:
    j, s = job(op("counter_v2", 4, COUNTER)), snap(op("counter", 4, COUNTER))
    without = plan(j, s)
    assert not without.ok
    assert without.row("counter_v2").action == "new"
    assert without.row("counter").action == "dropped"
    refused_with(without, "'counter'", "allow_non_restored_state")

    mapped = plan(j, s, uid_map={"counter": "counter_v2"})
    assert mapped.ok, mapped.refusals
    row = mapped.row("counter_v2")
    assert (row.old_uid, row.action, row.states) == ("counter", "restore", ("count", "seen"))
    assert [r.uid for r in mapped.rows] == ["counter_v2"]
    assert any("uid_map" in n for n in row.notes)


def test_added_operators_start_empty_or_are_stateless() -> None:
    p = plan(
        job(op("counter", 4, COUNTER), op("dedup", 4, {"ids": "map"}), op("map", 4)),
        snap(op("counter", 4, COUNTER)),
    )
    assert p.ok
    dedup, mapper = p.row("dedup"), p.row("map")
    assert (dedup.action, dedup.old_uid, dedup.old_parallelism) == ("new", None, None)
    assert dedup.new_states == ("ids",)
    assert (mapper.action, mapper.states) == ("stateless", ())


def test_operator_in_snapshot_without_state_is_new_and_stateless_ones_vanish_quietly() -> None:
    p = plan(job(op("counter", 4, COUNTER)), snap(op("counter", 4, stateful=True), op("filter", 2)))
    assert p.ok
    assert p.row("counter").action == "new" and p.row("counter").old_parallelism == 4
    assert p.row("filter").action == "removed"


def test_removed_stateful_operator_needs_allow_non_restored_state() -> None:
    j = job(op("counter", 4, COUNTER))
    s = snap(op("counter", 4, COUNTER), op("legacy", 2, {"x": "value", "y": "list"}))
    refused = plan(j, s)
    assert not refused.ok
    reason = refused_with(refused, "'legacy'")
    assert "'x'" in reason and "'y'" in reason and "allow_non_restored_state" in reason
    assert refused.row("legacy").refusals == (reason,)

    allowed = plan(j, s, allow_non_restored_state=True)
    assert allowed.ok
    row = allowed.row("legacy")
    assert (row.action, row.old_parallelism, row.new_parallelism, row.dropped_states) == (
        "dropped",
        2,
        None,
        ("x", "y"),
    )


def test_state_no_longer_registered_needs_allow_non_restored_state() -> None:
    j = job(op("counter", 4, {"count": "value"}))
    s = snap(op("counter", 4, COUNTER))
    reason = refused_with(plan(j, s), "'counter'", "'seen'")
    assert "not registered" in reason
    allowed = plan(j, s, allow_non_restored_state=True)
    assert allowed.ok
    assert (allowed.row("counter").states, allowed.row("counter").dropped_states) == (("count",), ("seen",))


def test_stateful_operator_that_became_stateless_drops_its_state_only_when_allowed() -> None:
    j, s = job(op("counter", 4)), snap(op("counter", 4, COUNTER))
    refused = plan(j, s)
    assert refused.row("counter").action == "stateless" and len(refused.refusals) == 2
    assert plan(j, s, allow_non_restored_state=True).ok


def test_new_state_in_existing_operator_starts_empty() -> None:
    p = plan(job(op("counter", 4, {**COUNTER, "last": "value"})), snap(op("counter", 4, COUNTER)))
    assert p.ok
    assert p.row("counter").new_states == ("last",)


@pytest.mark.parametrize(
    ("old_p", "new_p", "expected"),
    [
        (4, 2, [((0, 63), (0, 1)), ((64, 127), (2, 3))]),
        (
            4,
            8,
            [
                ((0, 15), (0,)),
                ((16, 31), (0,)),
                ((32, 47), (1,)),
                ((48, 63), (1,)),
                ((64, 79), (2,)),
                ((80, 95), (2,)),
                ((96, 111), (3,)),
                ((112, 127), (3,)),
            ],
        ),
        (4, 3, [((0, 42), (0, 1)), ((43, 85), (1, 2)), ((86, 127), (2, 3))]),
    ],
)
def test_rescaling_assigns_key_group_ranges_and_the_old_subtasks_to_read(
    old_p: int, new_p: int, expected: list[tuple[tuple[int, int], tuple[int, ...]]]
) -> None:
    p = plan(job(op("counter", new_p, COUNTER)), snap(op("counter", old_p, COUNTER)))
    assert p.ok
    row = p.row("counter")
    assert (row.action, row.old_parallelism, row.new_parallelism) == ("rescale", old_p, new_p)
    got = [((a.key_group_range.first, a.key_group_range.last), a.old_subtasks) for a in row.subtasks]
    assert got == expected
    assert [a.key_groups for a in row.subtasks] == [groups for groups, _ in expected]  # (first, last)
    assert [a.subtask for a in row.subtasks] == list(range(new_p))
    covered = [g for a in row.subtasks for g in a.key_group_range]
    assert covered == list(range(MAX_P))  # every key group exactly once, in order


def test_parallelism_option_overrides_every_operator() -> None:
    p = plan(job(op("counter", 4, COUNTER), op("map", 4)), snap(op("counter", 4, COUNTER)), parallelism=2)
    assert p.ok
    assert (p.row("counter").action, p.row("counter").new_parallelism) == ("rescale", 2)
    assert p.row("map").new_parallelism == 2
    assert len(p.row("counter").subtasks) == 2


def test_operator_list_state_gets_a_round_robin_description() -> None:
    p = plan(
        job(op("src", 2, {"offsets": "operator_list", "splits": "union_list"})),
        snap(op("src", 4, {"offsets": "operator_list", "splits": "union_list"})),
    )
    assert p.ok
    row = p.row("src")
    assert row.action == "rescale" and row.subtasks == ()  # no keyed state, no key groups
    split = next(n for n in row.notes if "'offsets'" in n)
    union = next(n for n in row.notes if "'splits'" in n)
    assert "round-robin" in split and "4 old subtasks" in split and "2 contiguous chunks" in split
    assert "union" in union and "all elements" in union


def test_max_parallelism_change_is_refused_with_advice() -> None:
    p = plan(job(op("counter", 4, COUNTER), max_p=256), snap(op("counter", 4, COUNTER), max_p=128))
    reason = refused_with(p, "max_parallelism")
    assert "128" in reason and "256" in reason and "keep max_parallelism=128" in reason
    assert p.row("counter").subtasks == ()


def test_kind_change_is_incompatible_and_named() -> None:
    p = plan(job(op("counter", 4, {"count": "map", "seen": "map"})), snap(op("counter", 4, COUNTER)))
    reason = refused_with(p, "kind")
    for word in ("'counter'", "'count'", "value", "map"):
        assert word in reason
    assert p.row("counter").refusals == (reason,)


SCHEMA = {"n": FieldType("int64"), "label": FieldType("string", nullable=True)}


def schema_plan(new_fields: dict[str, FieldType]) -> RestorePlan:
    return plan(
        job(op("counter", 4, COUNTER, value_schemas={"count": new_fields})),
        snap(op("counter", 4, COUNTER, value_schemas={"count": SCHEMA})),
    )


def test_schema_added_nullable_field_is_compatible() -> None:
    p = schema_plan({**SCHEMA, "note": FieldType("string", nullable=True)})
    assert p.ok
    assert any("'note'" in n and "nullable" in n for n in p.row("counter").notes)


@pytest.mark.parametrize(
    ("new_fields", "field", "word"),
    [
        ({"label": SCHEMA["label"]}, "'n'", "removed"),
        ({**SCHEMA, "n": FieldType("string")}, "'n'", "type"),
        ({**SCHEMA, "extra": FieldType("int64")}, "'extra'", "non-nullable"),
        ({**SCHEMA, "label": FieldType("string")}, "'label'", "non-nullable"),
    ],
)
def test_schema_changes_that_break_restored_entries_are_refused(
    new_fields: dict[str, FieldType], field: str, word: str
) -> None:
    p = schema_plan(new_fields)
    reason = refused_with(p, field, word)
    assert "'counter'" in reason and "'count'" in reason and "field" in reason


def test_schema_on_one_side_only_is_noted_not_refused() -> None:
    p = plan(job(op("counter", 4, COUNTER, value_schemas={"count": SCHEMA})), snap(op("counter", 4, COUNTER)))
    assert p.ok
    assert any("not checked" in n for n in p.row("counter").notes)


def test_schema_dicts_are_accepted() -> None:
    shape = op("counter", 4, COUNTER, value_schemas={"count": {"n": {"type": "int64", "nullable": False}}})
    assert shape.value_schemas["count"]["n"] == FieldType("int64", nullable=False)


def test_foreign_job_needs_allow_foreign() -> None:
    j, s = job(op("counter", 4, COUNTER)), snap(op("counter", 4, COUNTER), job_id="other")
    reason = refused_with(plan(j, s), "'other'", "allow_foreign")
    assert "'orders'" in reason
    allowed = plan(j, s, allow_foreign=True)
    assert allowed.ok and any("'other'" in n for n in allowed.notes)


@pytest.mark.parametrize(
    ("uid_map", "words"),
    [
        ({"ghost": "counter"}, ("'ghost'", "not an operator of the snapshot")),
        ({"counter": "nowhere"}, ("'nowhere'", "not an operator of the job")),
        ({"legacy": "counter"}, ("'counter'", "'legacy'", "would all restore into")),
    ],
)
def test_bad_uid_map_entries_are_refused_by_name(uid_map: dict[str, str], words: tuple[str, ...]) -> None:
    j = job(op("counter", 4, COUNTER))
    s = snap(op("counter", 4, COUNTER), op("legacy", 4, COUNTER))
    p = plan(j, s, uid_map=uid_map, allow_non_restored_state=True)
    refused_with(p, *words)
    assert len(p.refusals) == 1  # no second refusal for the same operator


def test_swapping_two_uids_is_fine() -> None:
    j = job(op("a", 2, {"x": "value"}), op("b", 4, {"y": "value"}))
    s = snap(op("a", 4, {"y": "value"}), op("b", 2, {"x": "value"}))
    p = plan(j, s, uid_map={"a": "b", "b": "a"})
    assert p.ok, p.refusals
    assert (p.row("a").old_uid, p.row("a").action, p.row("b").old_uid) == ("b", "restore", "a")


@pytest.mark.parametrize(
    ("options", "word"),
    [
        ({"parallelism": 0}, "parallelism"),
        ({"parallelism": True}, "parallelism"),
        ({"claim_mode": "MAYBE"}, "claim mode"),
        ({"uid_map": {"a": ""}}, "uid_map"),
        ({"allow_foreign": "yes"}, "allow_foreign"),
    ],
)
def test_bad_options_raise_at_once(options: dict[str, Any], word: str) -> None:
    with pytest.raises(RestorePlanError, match=word) as err:
        RestoreOptions(**options)
    assert "\n" not in str(err.value)


def test_parallelism_above_max_parallelism_raises() -> None:
    with pytest.raises(RestorePlanError, match="exceeds max_parallelism 128"):
        plan(job(op("counter", 4, COUNTER)), snap(op("counter", 4, COUNTER)), parallelism=129)


@pytest.mark.parametrize(
    ("build", "word"),
    [
        (lambda: job(op("a"), op("a")), "duplicate"),
        (lambda: job(op("a", 200)), "max_parallelism"),
        (lambda: JobShape("j", 0, ()), "max_parallelism"),
        (lambda: op("a", 0), "parallelism"),
        (lambda: OperatorShape("a", False, False, 1, {"x": "operator_list"}), "stateless"),
        (lambda: OperatorShape("a", True, False, 1, {"x": "value"}), "not keyed"),
        (lambda: op("a", 1, {"x": "value"}, value_schemas={"y": {}}), "unknown state"),
        (lambda: SnapshotShape("j", 8, "backup", None, "", ()), "kind"),
        (lambda: SnapshotShape("j", 8, "checkpoint", None, "", ()), "checkpoint_id"),
    ],
)
def test_malformed_shapes_raise(build: Any, word: str) -> None:
    with pytest.raises(RestorePlanError, match=word):
        build()


def test_claim_mode_is_recorded_with_its_meaning() -> None:
    j, s = job(op("counter", 4, COUNTER)), snap(op("counter", 4, COUNTER))
    claim = plan(j, s, claim_mode="CLAIM")
    no_claim = plan(j, s)
    assert (claim.claim_mode, no_claim.claim_mode) == ("CLAIM", "NO_CLAIM")
    assert "ownership" in claim.claim_mode_meaning and "delete" in claim.claim_mode_meaning
    assert "never modified or deleted" in no_claim.claim_mode_meaning
    assert "full" in no_claim.claim_mode_meaning
    assert set(CLAIM_MODES) == {"CLAIM", "NO_CLAIM"}


def test_raise_if_refused_lists_every_reason_after_a_summary_line() -> None:
    p = plan(
        job(op("counter", 4, {"count": "list"}), max_p=256),
        snap(op("counter", 4, COUNTER), op("legacy", 4, COUNTER), job_id="other"),
    )
    assert len(p.refusals) == 5
    with pytest.raises(RestorePlanError) as err:
        p.raise_if_refused()
    lines = str(err.value).splitlines()
    assert "refused: 5 problems" in lines[0]
    assert lines[1:] == [f"  - {r}" for r in p.refusals]


def messy_plan() -> RestorePlan:
    return plan(
        job(
            op("src", 2, {"offsets": "operator_list"}),
            op("counter_v2", 2, {"count": "value"}, value_schemas={"count": SCHEMA}),
            op("dedup", 2, {"ids": "map"}),
            op("map", 2),
        ),
        snap(
            op("src", 4, {"offsets": "operator_list"}),
            op("counter", 4, COUNTER, value_schemas={"count": SCHEMA}),
            op("legacy", 4, {"x": "value"}),
            op("filter", 4),
        ),
        uid_map={"counter": "counter_v2"},
        claim_mode="CLAIM",
    )


def test_json_round_trips_for_plan_and_inputs() -> None:
    p = messy_plan()
    doc = json.loads(json.dumps(p.to_json()))
    assert doc["format_version"] == 1 and doc["ok"] is False
    assert doc["operators"][1]["subtasks"][0] == {"subtask": 0, "key_groups": [0, 63], "old_subtasks": [0, 1]}
    assert plan_from_json(doc) == p

    j = job(op("c", 4, COUNTER, value_schemas={"count": SCHEMA}), op("m", 1))
    s = snap(op("c", 4, COUNTER), op("src", 2, {"o": "union_list"}))
    o = RestoreOptions(True, {"c": "c"}, 3, "CLAIM", True)
    assert from_jsonable(JobShape, json.loads(json.dumps(to_jsonable(j))), what="job") == j
    assert from_jsonable(SnapshotShape, json.loads(json.dumps(to_jsonable(s))), what="snapshot") == s
    assert from_jsonable(RestoreOptions, json.loads(json.dumps(to_jsonable(o))), what="options") == o
    assert from_jsonable(RestoreOptions, {}, what="options") == RestoreOptions()


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"job_id": "j", "max_parallelism": "8", "operators": []}, "expected int, got '8'"),
        ({"job_id": "j", "max_parallelism": 8}, "missing field 'operators'"),
        (
            {"job_id": "j", "max_parallelism": 8, "operators": [{"uid": "a", "stateful": 1}]},
            "expected bool, got 1",
        ),
        ([], "expected an object for JobShape, got list"),
        (
            {
                "job_id": "j",
                "max_parallelism": 8,
                "operators": [{"uid": "a", "stateful": True, "keyed": True, "parallelism": 0}],
            },
            "operator 'a': parallelism must be a positive int",
        ),
    ],
)
def test_bad_json_raises_one_line_naming_the_problem(doc: Any, problem: str) -> None:
    with pytest.raises(ManifestError) as err:
        from_jsonable(JobShape, doc, what="job")
    message = str(err.value)
    assert message.startswith("job is invalid (") and problem in message and "\n" not in message


def test_table_shows_every_uid_action_and_refusal() -> None:
    p = messy_plan()
    table = render_plan(p)
    for row in p.rows:
        assert row.uid in table and row.action in table
    assert {r.action for r in p.rows} == {"rescale", "new", "stateless", "dropped", "removed"}
    for reason in p.refusals:
        assert reason in table
    assert "CLAIM" in table and "4 -> 2" in table and "subtask 1: key groups 64-127" in table
    header = next(line for line in table.splitlines() if line.startswith("UID"))
    src = next(line for line in table.splitlines() if line.startswith("src "))
    assert header.index("ACTION") == src.index("rescale")  # fixed-width columns


def test_table_caps_long_subtask_lists() -> None:
    p = plan(job(op("c", 64, COUNTER)), snap(op("c", 4, COUNTER)))
    table = render_plan(p)
    assert "subtask 15:" in table and "subtask 16:" not in table and "48 more subtasks" in table
    assert table.splitlines()[-2].startswith("OK")


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 512).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m), st.integers(1, m))))
def test_planned_ranges_partition_key_groups_and_list_every_old_owner(mpp: tuple[int, int, int]) -> None:
    max_p, p_old, p_new = mpp
    p = plan(job(op("c", p_new, COUNTER), max_p=max_p), snap(op("c", p_old, COUNTER), max_p=max_p))
    assert p.ok
    assignments = p.row("c").subtasks
    assert assignments == key_group_assignment(max_p, p_old, p_new)
    assert [g for a in assignments for g in a.key_group_range] == list(range(max_p))
    for new_subtask, a in enumerate(assignments):
        assert a.subtask == new_subtask
        owners = {subtask_for_key_group(max_p, p_old, g) for g in a.key_group_range}
        assert set(a.old_subtasks) == owners  # every old owner listed, and nothing else
