"""Generation fencing: a zombie of an older generation never commits after a fence, even racing it."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from spark_jobs.sinks.postgres_ledger import AFTER_FENCE_CHECK, Ledger
from state_store.core.twophase import FencedTransactionError
from tests.unit.sinks_postgres.conftest import Db, KillAt, batch, stage

ROUNDS = 50


def test_a_zombie_commit_after_the_fence_is_refused_and_the_table_is_unchanged(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    first = stage(sink, 1, batch(k=["a"], v=[1], g=[0]), gen=0)
    assert sink.commit([first]) == (1,)
    zombie = stage(sink, 2, batch(k=["a", "b"], v=[2, 2], g=[0, 0]), gen=0)
    rows = db.rows()
    db.sink(unique_key=("k",)).fence(1)  # a restore into generation 1
    with pytest.raises(FencedTransactionError, match="generation 1 already committed or fenced") as caught:
        sink.commit([zombie])
    assert "\n" not in str(caught.value)
    assert db.rows() == rows
    assert db.commits() == [(1, 0, False)]
    assert sink.recover_and_commit([first]) == ()  # a retry of what was committed stays a no-op


def test_a_newer_generations_commit_fences_the_older_generation(db: Db) -> None:
    sink = db.sink(unique_key=("k",))
    assert sink.commit([stage(sink, 1, batch(k=["a"], v=[1], g=[1]), gen=1)]) == (1,)
    assert sink.fence_generation() == 1
    with pytest.raises(FencedTransactionError):
        sink.commit([stage(sink, 2, batch(k=["a"], v=[2], g=[0]), gen=0)])
    assert db.rows() == [("a", 1, 1)]


def test_fencing_is_idempotent_and_never_moves_back(db: Db) -> None:
    sink = db.sink()
    sink.fence(3)
    sink.fence(3)
    sink.fence(2)
    assert sink.fence_generation() == 3


def race_round(db: Db, n: int, seed: int) -> dict[str, Any]:
    """A zombie of generation 2n commits checkpoint n while a restore fences generation 2n + 1.

    Returns whether the commit landed, and whether the fencer saw it as committed right after its
    fence returned (a fence that returned first must have refused the commit)."""
    jitter = random.Random(seed)
    zombie_gen = 2 * n
    hold = jitter.uniform(0, 0.004)
    zombie = db.sink(kill=KillAt(AFTER_FENCE_CHECK, n, action=lambda: time.sleep(hold)))
    record = stage(zombie, n, batch(k=[f"z{n}"], v=[n], g=[zombie_gen]), gen=zombie_gen)
    fencer = db.sink()
    start = threading.Barrier(2)
    outcome: dict[str, Any] = {}
    delays = (jitter.uniform(0, 0.004), jitter.uniform(0, 0.004))

    def commit() -> None:
        start.wait()
        time.sleep(delays[0])
        try:
            outcome["committed"] = zombie.commit([record]) == (n,)
        except FencedTransactionError:
            outcome["committed"] = False

    def fence() -> None:
        start.wait()
        time.sleep(delays[1])
        fencer.fence(zombie_gen + 1)
        outcome["seen_at_fence"] = n in fencer.committed_checkpoint_ids()

    threads = [threading.Thread(target=commit), threading.Thread(target=fence)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    outcome["in_table"] = db.exists() and (f"z{n}", n, zombie_gen) in db.rows()
    return outcome


def assert_never_both(outcome: dict[str, Any]) -> None:
    """Never both: a commit that landed was visible when the fence returned (it came first)."""
    assert outcome["in_table"] is outcome["committed"]
    if outcome["committed"]:
        assert outcome["seen_at_fence"], "the zombie committed after the fence had returned"


def test_a_zombie_commit_racing_a_fence_never_lands_after_it(db: Db) -> None:
    outcomes = [race_round(db, n, seed=n) for n in range(1, ROUNDS + 1)]
    for outcome in outcomes:
        assert_never_both(outcome)
    committed = sum(o["committed"] for o in outcomes)
    assert 0 < committed < ROUNDS, f"the race was not exercised: {committed}/{ROUNDS} commits landed"


def test_the_race_check_catches_a_commit_that_reads_the_fence_without_locking_it(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proof that the race test can fail: without FOR UPDATE a zombie lands after the fence."""

    def unlocked(self: Ledger) -> int:
        self.conn.execute(
            f"INSERT INTO {self.names.schema}.epochal_sink_fences (job_id, sink_uid, generation) "
            "VALUES (%s, %s, -1) ON CONFLICT DO NOTHING",
            (self.job_id, self.sink_uid),
        )
        row = self.conn.execute(
            f"SELECT generation FROM {self.names.schema}.epochal_sink_fences "
            "WHERE job_id = %s AND sink_uid = %s",
            (self.job_id, self.sink_uid),
        ).fetchone()
        assert row is not None
        return int(row[0])

    monkeypatch.setattr(Ledger, "_lock_fence", unlocked)
    db.sink().fence(0)  # the fence row exists (as after any earlier commit)
    checked, fenced = threading.Event(), threading.Event()
    zombie = db.sink(kill=KillAt(AFTER_FENCE_CHECK, 1, action=lambda: (checked.set(), fenced.wait(10))))
    record = stage(zombie, 1, batch(k=["z"], v=[1], g=[0]), gen=0)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(committed=zombie.commit([record]) == (1,)))
    thread.start()
    assert checked.wait(10)
    fencer = db.sink()
    fencer.fence(1)
    outcome["seen_at_fence"] = 1 in fencer.committed_checkpoint_ids()
    fenced.set()  # the zombie goes on only now: its commit lands after the fence returned
    thread.join(timeout=30)
    outcome["in_table"] = ("z", 1, 0) in db.rows()
    with pytest.raises(AssertionError, match="committed after the fence"):
        assert_never_both(outcome)
