"""A zombie racing the fence, in threads: the zombie (generation 1) has decided to commit checkpoint 2
and written its data files when a restore fences generation 2. Whoever wins the catalog's
compare-and-swap, never both: either the zombie's snapshot lands before the fence's (it committed
first, the fence follows it), or the zombie is refused and nothing of it is in the table."""

from __future__ import annotations

import random
import threading
from typing import Any

from spark_jobs.sinks.iceberg import BEFORE_ICEBERG_COMMIT
from state_store.core.ports import ObjectStore
from state_store.core.twophase import FencedTransactionError
from tests.unit.sinks_iceberg.support import JOB, load, make_sink, standard_epoch

ROUNDS = 24
Catalog = dict[str, str]


def race(store: ObjectStore, catalog: Catalog, uid: str, order: str, rng: random.Random) -> str:
    """One round on sink ``uid``: ``order`` is "fence-first", "zombie-first" or "free" (both go at
    once, the zombie after a random pause of up to 40 ms, the fence of up to 5 ms). Returns
    "committed" or "fenced"."""
    setup = make_sink(store, catalog, uid=uid)
    setup.commit(standard_epoch(setup, 1))
    start = threading.Barrier(2)
    fence_done, zombie_done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def at_commit(point: str, checkpoint_id: int | None = None) -> None:
        if point != BEFORE_ICEBERG_COMMIT or "decided" in outcome:
            return
        outcome["decided"] = True
        start.wait()  # decided, data files written: the restore starts fencing now
        if order == "fence-first":
            fence_done.wait(10)
        elif order == "free":  # about as long as a fence takes: either may reach the catalog first
            threading.Event().wait(rng.uniform(0, 0.04))

    zombie = make_sink(store, catalog, uid=uid, kill=at_commit)
    records = standard_epoch(zombie, 2)

    def run_zombie() -> None:
        try:
            zombie.commit(records)
            outcome["zombie"] = "committed"
        except FencedTransactionError:
            outcome["zombie"] = "fenced"
        except BaseException as exc:  # reported by the assertion below
            outcome["zombie"] = repr(exc)
        finally:
            zombie_done.set()

    def run_fence() -> None:
        try:
            start.wait()
            if order == "zombie-first":
                zombie_done.wait(10)
            elif order == "free":
                threading.Event().wait(rng.uniform(0, 0.005))
            make_sink(store, catalog, uid=uid).fence(2)
        except BaseException as exc:
            outcome["fence"] = repr(exc)
        finally:
            fence_done.set()

    threads = [threading.Thread(target=run_zombie), threading.Thread(target=run_fence)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "fence" not in outcome, outcome["fence"]
    assert outcome.get("zombie") in ("committed", "fenced"), outcome
    result: str = outcome["zombie"]
    return result


def sink_snapshots(catalog: Catalog, uid: str) -> list[tuple[str, int]]:
    """(kind, checkpoint id) of the sink's snapshots along the current snapshot's ancestry, oldest first."""
    import json

    from pyiceberg.table.snapshots import ancestors_of

    table = load(catalog)
    assert table is not None
    out = []
    for snap in ancestors_of(table.current_snapshot(), table.metadata):
        info = json.loads(snap.summary.get("epochal") or "{}") if snap.summary is not None else {}
        if info.get("sink_uid") == uid and info.get("job_id") == JOB:
            out.append((info["kind"], info["checkpoint_id"]))
    return out[::-1]


def test_a_zombie_racing_the_fence_either_commits_before_it_or_is_refused_never_both(
    store: ObjectStore, catalog: Catalog
) -> None:
    rng = random.Random(21)
    outcomes = []
    for r in range(ROUNDS):
        uid = f"race-{r}"
        order = ("fence-first", "zombie-first", "free")[r % 3]
        result = race(store, catalog, uid, order, rng)
        outcomes.append(result)
        history = sink_snapshots(catalog, uid)
        table = load(catalog)
        assert table is not None and table.properties[f"epochal/{JOB}/{uid}/fence"] == "2"
        if result == "committed":
            assert history == [("data", 1), ("data", 2), ("fence", 0)], (r, order, history)
        else:
            assert history == [("data", 1), ("fence", 0)], (r, order, history)
        if order == "fence-first":
            assert result == "fenced"
        if order == "zombie-first":
            assert result == "committed"
    rows = load(catalog)
    assert rows is not None
    committed = outcomes.count("committed")
    assert len(rows.scan().to_arrow()) == 6 * ROUNDS + 6 * committed  # every round's checkpoint 1, once
