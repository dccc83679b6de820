"""Run chaos schedules against the clickstream example (in process, small input) and check the
invariants after every schedule (see ``invariants``).

One schedule: ``ticks`` epochs with the schedule's faults, one fault-free epoch after them (so a
fault in the last epoch still has to be recovered from), one more if a deferred zombie acted in
that one; then the output and state checks, and -- after the clock passes the orphan grace
period -- the production retention (``apply_job_retention``) followed by the orphan check.

The fault-free reference (rows after every tick, state digest per input cut) is computed once per
:class:`ChaosConfig` and reused. Every schedule uses its own fresh store (or a fresh job id in the
``--store`` given), so schedules are independent and any one can be replayed from its seed.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.api.job import Job
from spark_jobs.chaos import faults
from spark_jobs.chaos.driver import Driver, TickPlan
from spark_jobs.chaos.invariants import Checker, Reference, Violation
from spark_jobs.chaos.observe import completed_metadata, positions_key, state_digest
from spark_jobs.chaos.schedule import Schedule, generate
from spark_jobs.chaos.store import ChaosStore
from spark_jobs.examples.clickstream import build_job
from spark_jobs.runtime import cycle
from spark_jobs.sinks.reader import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.clocks import ManualClock
from state_store.core.ports import ObjectStore

SINK = "page-counts-sink"


@dataclass(frozen=True)
class ChaosConfig:
    """The job and epoch shape every schedule of a run shares (small: one schedule ~1-3 s)."""

    ticks: int = 2
    step_ms: int = 10_000
    partitions: int = 2
    events_per_second: int = 5
    parallelism: int = 2
    max_parallelism: int = 8
    retained_checkpoints: int = 1
    max_recovery_runs: int = 3
    start_ms: int = DEFAULT_START_MS

    def job(self, job_id: str = "clickstream") -> Job:
        job = build_job(
            job_id,
            partitions=self.partitions,
            events_per_second=self.events_per_second,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            start_ms=self.start_ms,
        )
        job.retained_checkpoints = self.retained_checkpoints
        job.checkpoint_config()  # validates
        return job


@dataclass
class ScheduleResult:
    schedule: Schedule
    violations: list[Violation]
    fired: Counter[str]
    recovery_runs: int | None
    seconds: float
    notes: list[str] = field(default_factory=list)
    armed: Counter[str] = field(default_factory=Counter)


_REFERENCES: dict[ChaosConfig, Reference] = {}


def reference(config: ChaosConfig) -> Reference:
    """The fault-free run for ``config`` (cached): rows after each tick, digests by input cut."""
    if config in _REFERENCES:
        return _REFERENCES[config]
    clock = ManualClock(config.start_ms)
    store = ChaosStore(clock)
    try:
        job = config.job()
        driver = Driver(job, store, clock, random.Random(0), 0.0)
        rows_by_tick: list[list[Any]] = []
        states: dict[Any, dict[str, Any]] = {}
        for tick in range(config.ticks + 3):
            clock.advance(config.step_ms)
            status = driver.tick(tick, TickPlan())
            if status != "completed":
                raise RuntimeError(f"the fault-free reference run did not complete tick {tick}: {status}")
            table = read_committed(store.inner, job.job_id, SINK)
            rows_by_tick.append([tuple(r.values()) for r in table.to_pylist()])
            for meta in completed_metadata(store.inner, job.job_id).values():
                states.setdefault(positions_key(meta), state_digest(store.inner, meta, job.max_parallelism))
        names = table.column_names
        ref = Reference(rows_by_tick, states, (names.index("page"),), names.index("window_start"))
    finally:
        store.close()
    _REFERENCES[config] = ref
    return ref


def run_schedule(
    schedule: Schedule,
    config: ChaosConfig | None = None,
    *,
    inner: ObjectStore | None = None,
    job_id: str = "clickstream",
) -> ScheduleResult:
    """Run one schedule on a fresh store (or ``inner``, under ``job_id``) and check invariants 1-6."""
    config = config or ChaosConfig(ticks=schedule.ticks)
    ref = reference(config)
    started = time.monotonic()
    clock = ManualClock(config.start_ms)
    store = ChaosStore(clock, seed=schedule.seed, inner=inner)
    job = config.job(job_id)
    driver = Driver(job, store, clock, random.Random(schedule.seed), schedule.retry_bias)
    checker = Checker(job, store.inner, SINK, driver)
    driver.monitor = checker.monitor
    driver.before_gate, driver.after_gate = checker.before_gate, checker.after_gate
    armed: Counter[str] = Counter()
    try:
        pending_deferred: list[Any] = []
        tick, last_fault_tick = 0, config.ticks - 1
        while tick <= last_fault_tick + 1:  # + 1: the fault-free epoch after the last fault
            clock.advance(config.step_ms)
            plan = TickPlan()
            for event in schedule.at(tick):
                faults.arm(event, driver, plan)
                armed[event.kind] += 1
            resumed: list[int] = []
            for hook in pending_deferred:  # zombies of the previous tick resume after this complete
                plan.after.setdefault("complete", []).append(_marking(hook, resumed))
            driver.tick(tick, plan)
            store.disarm()
            driver.note_fired()
            for hook in plan.after.pop("complete", []):  # the tick never completed: resume anyway
                hook(driver, -1)
            if resumed:
                last_fault_tick = max(last_fault_tick, tick)  # a zombie acted: one more epoch
            pending_deferred = plan.deferred
            tick += 1
        final_tick = tick - 1
        checker.check_final_latest()
        checker.check_output(ref, final_tick)
        checker.check_state(ref)
        recovery = checker.check_recovery(driver, config.max_recovery_runs)
        # the grace period after the newest write (a real store stamps files with the wall clock)
        newest = max((i.modified_ms for i in store.inner.list(f"{job.job_id}/")), default=0)
        target = max(clock.now_ms(), newest) + job.checkpoint_config().orphan_grace_ms + 1
        clock.advance(target - clock.now_ms())
        try:
            token = driver.take_lease(driver.holder("final-maintenance"), "epochal_maintenance").token
            cycle.apply_job_retention(job, store, clock, lease_token=token)
        except Exception as exc:
            checker.fail(5, f"retention after the grace period failed: {type(exc).__name__}: {exc}")
        checker.check_references()
        checker.check_orphans()
    finally:
        store.close()
    fired: Counter[str] = Counter(e.what[6:] for e in driver.events if e.what.startswith("fault:"))
    notes = [e.what for e in driver.events if e.what.startswith(("failure:", "info:"))]
    seconds = time.monotonic() - started
    return ScheduleResult(schedule, checker.violations, fired, recovery, seconds, notes, armed)


def _marking(hook: Any, resumed: list[int]) -> Any:
    def run(driver: Driver, checkpoint_id: int) -> None:
        resumed.append(checkpoint_id)
        hook(driver, checkpoint_id)

    return run


@dataclass
class Summary:
    schedules: int = 0
    seed: int = 0
    fired: Counter[str] = field(default_factory=Counter)
    armed: Counter[str] = field(default_factory=Counter)
    violations: list[tuple[int, Violation]] = field(default_factory=list)
    recovery_runs: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: ScheduleResult) -> None:
        self.schedules += 1
        self.fired.update(result.fired)
        self.armed.update(result.armed)
        self.violations.extend((result.schedule.seed, v) for v in result.violations)
        if result.recovery_runs is not None:
            self.recovery_runs.append(result.recovery_runs)
        self.seconds += result.seconds

    def recovery_p50(self) -> int:
        runs = sorted(self.recovery_runs)
        return runs[len(runs) // 2] if runs else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedules": self.schedules,
            "seed": self.seed,
            "faults_injected": dict(sorted(self.fired.items())),
            "faults_armed": dict(sorted(self.armed.items())),
            "faults_total": sum(self.fired.values()),
            "violations": len(self.violations),
            "violation_examples": [f"schedule {s}: {v}" for s, v in self.violations[:20]],
            "recovery_runs_p50": self.recovery_p50(),
            "recovery_runs_max": max(self.recovery_runs, default=0),
            "seconds": round(self.seconds, 1),
            "seconds_per_schedule": round(self.seconds / max(1, self.schedules), 2),
        }


def schedule_seeds(count: int, seed: int) -> list[int]:
    """The per-schedule seeds of a run: a pure function of (count, seed)."""
    rng = random.Random(f"epochal-chaos-run-{seed}")
    return [rng.randrange(2**31) for _ in range(count)]


def run_many(
    count: int,
    seed: int,
    config: ChaosConfig | None = None,
    *,
    store_factory: Callable[[int], tuple[ObjectStore | None, str]] | None = None,
    progress: Callable[[int, ScheduleResult], None] | None = None,
    schedules: Iterable[Schedule] | None = None,
    workers: int = 1,
) -> Summary:
    """Run ``count`` schedules generated from ``seed`` (or the given ``schedules``); ``workers`` > 1
    runs them in forked processes (in-memory stores only), results merged in schedule order."""
    config = config or ChaosConfig()
    if workers > 1:
        return _run_parallel(count, seed, config, workers, progress, schedules)
    summary = Summary(seed=seed)
    todo = (
        list(schedules)
        if schedules is not None
        else [generate(s, config.ticks) for s in schedule_seeds(count, seed)]
    )
    for index, schedule in enumerate(todo):
        inner, job_id = store_factory(index) if store_factory else (None, "clickstream")
        result = run_schedule(schedule, config, inner=inner, job_id=job_id)
        summary.add(result)
        if progress is not None:
            progress(index, result)
    return summary


def _one(item: tuple[Schedule, ChaosConfig]) -> ScheduleResult:
    return run_schedule(item[0], item[1])


def _run_parallel(
    count: int,
    seed: int,
    config: ChaosConfig,
    workers: int,
    progress: Callable[[int, ScheduleResult], None] | None,
    schedules: Iterable[Schedule] | None,
) -> Summary:
    import multiprocessing

    reference(config)  # computed once in the parent, inherited by the forked workers
    todo = (
        list(schedules)
        if schedules is not None
        else [generate(s, config.ticks) for s in schedule_seeds(count, seed)]
    )
    summary = Summary(seed=seed)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for index, result in enumerate(pool.imap(_one, [(s, config) for s in todo])):
            summary.add(result)
            if progress is not None:
                progress(index, result)
    return summary
