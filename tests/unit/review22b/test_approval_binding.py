"""An approval applies to the ticket a person (or auto_approve) approved, and to nothing else; the
restore DAG's conf is checked before anything is planned (issue 22 review). The operators are
driven directly with a stand-in task instance (its XComs); a step that would touch the job's store
fails the test, so each refusal is shown to write nothing."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from epochal_airflow.operators.approval import (
    SHOWN_KEY,
    JobPosition,
    PlanTicket,
    RestoreApprovalOperator,
    RestorePlanOperator,
)
from epochal_airflow.operators.state import RestoreOperator

ARGS = {"job": "clickstream", "store_uri": "file:///nowhere"}


def ticket(losses: tuple[str, ...] = (), source: str = "2", latest: int = 2) -> PlanTicket:
    return PlanTicket(
        "clickstream", source, {"rows": []}, losses, JobPosition(latest, 1), "plan table", False
    )


class FakeTI:
    """XComs by (task_id, key); what the operator pushes lands here too."""

    dag_id = "epochal_restore"
    task_id = "approve_restore"

    def __init__(self, xcoms: dict[tuple[str, str], Any]) -> None:
        self.xcoms = dict(xcoms)

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get((task_ids, key))

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[(self.task_id, key)] = value


class FakeRun:
    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf


def no_store(*_: Any, **__: Any) -> Any:
    raise AssertionError("the job's store was touched")


@pytest.fixture(autouse=True)
def storeless(monkeypatch: pytest.MonkeyPatch) -> None:
    from epochal_airflow.operators.checkpoint import EpochalOperator

    monkeypatch.setattr(EpochalOperator, "runtime", no_store)


def context(ti: FakeTI, conf: dict[str, Any] | None = None, params: tuple[str, ...] = ()) -> Any:
    return {"ti": ti, "run_id": "manual__1", "dag_run": FakeRun(conf or {}), "params": dict.fromkeys(params)}


# -- approve, then re-plan: the approval does not carry over --------------------------------------
def test_a_plan_re_run_after_its_approval_is_not_applied() -> None:
    shown, replanned = ticket(("rescales operator 'a' from 2 to 3",)), ticket(("drops state 'x'",), latest=4)
    approval = {"chosen_options": ["Approve"], "ticket": shown.digest()}
    ti = FakeTI(
        {("plan_restore", "return_value"): replanned.to_xcom(), ("approve_restore", "return_value"): approval}
    )
    op = RestoreOperator(task_id="restore", plan_task_id="plan_restore", **ARGS)
    with pytest.raises(AirflowFailException) as refused:
        op.execute(context(ti))
    assert str(refused.value) == (
        "restore of job clickstream: the plan of task 'plan_restore' is not the one approved in task "
        "'approve_restore' (a task was re-run after the approval): nothing was restored; clear "
        "'approve_restore' too to review this plan"
    )


def test_an_auto_approval_is_bound_to_the_lossless_ticket_it_approved() -> None:
    lossless = ticket()
    ti = FakeTI({("plan_restore", "return_value"): lossless.to_xcom()})
    op = RestoreApprovalOperator(task_id="approve_restore", auto_approve="True", timeout_minutes="1440")
    answer = op.execute(context(ti))
    assert answer == {"chosen_options": ["Approve"], "auto_approved": True, "ticket": lossless.digest()}
    assert ticket(latest=3).digest() != lossless.digest()  # another position: another ticket


def test_a_persons_answer_carries_the_ticket_they_were_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    lossy = ticket(("rescales operator 'a' from 2 to 3",))
    ti = FakeTI({("plan_restore", "return_value"): lossy.to_xcom()})
    op = RestoreApprovalOperator(task_id="approve_restore", auto_approve=True, timeout_minutes=None)
    monkeypatch.setattr(ApprovalOperator, "execute", lambda self, ctx: "awaiting input")
    assert op.execute(context(ti)) == "awaiting input"  # a lossy plan waits whatever auto_approve says
    assert ti.xcoms[("approve_restore", SHOWN_KEY)] == lossy.digest()
    ti.xcoms[("plan_restore", "return_value")] = ticket(latest=5).to_xcom()  # plan re-run meanwhile
    monkeypatch.setattr(
        ApprovalOperator, "execute_complete", lambda self, ctx, event: {"chosen_options": ["Approve"]}
    )
    answer = op.execute_complete(context(ti), {"chosen_options": ["Approve"], "responded_by_user": {}})
    assert answer["ticket"] == lossy.digest()  # what was shown, not what the plan task holds now


# -- conf abuse -----------------------------------------------------------------------------------
@pytest.mark.parametrize("minutes", ["-5", "0", "1e12", "inf", "nan", "soon"])
def test_a_bad_approval_timeout_is_one_line_naming_it(minutes: str) -> None:
    ti = FakeTI({("plan_restore", "return_value"): ticket(("rescales",)).to_xcom()})
    op = RestoreApprovalOperator(task_id="approve_restore", auto_approve="true", timeout_minutes=minutes)
    with pytest.raises(AirflowFailException) as refused:
        op.execute(context(ti))
    message = str(refused.value)
    assert (
        message.startswith("approval_timeout_minutes must be a number of minutes above 0")
        and "\n" not in message
    )
    assert repr(minutes) in message


@pytest.mark.parametrize(("name", "value"), [("auto_approve", "flase"), ("auto_approve", "yes")])
def test_auto_approve_that_is_not_a_boolean_is_refused(name: str, value: str) -> None:
    ti = FakeTI({("plan_restore", "return_value"): ticket().to_xcom()})
    op = RestoreApprovalOperator(task_id="approve_restore", auto_approve=value)
    with pytest.raises(AirflowFailException, match=rf"^{name} must be true or false, got '{value}'"):
        op.execute(context(ti))


def test_dry_run_that_is_not_a_boolean_never_restores() -> None:
    op = RestorePlanOperator(task_id="plan_restore", dry_run="yes", **ARGS)
    with pytest.raises(AirflowFailException, match=r"^dry_run must be true or false, got 'yes'"):
        op.request()


def test_an_unknown_conf_key_is_refused_before_anything_is_planned() -> None:
    op = RestorePlanOperator(task_id="plan_restore", **ARGS)
    params = ("job", "source", "parallelism", "dry_run", "auto_approve", "approval_timeout_minutes")
    conf = {"source": "latest", "paralellism": 3, "dry_run": False}
    with pytest.raises(AirflowFailException) as refused:
        op.execute(context(FakeTI({}), conf, params))
    assert str(refused.value).startswith(
        "epochal_restore has no parameter 'paralellism': did you mean 'parallelism'? known: "
    )
