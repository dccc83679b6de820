"""Chaos harness (issue 8): seeded random fault schedules against the example job, checked against
the six fault-tolerance invariants after every schedule.

* ``schedule`` -- schedules from a seed; every fault kind is a name (``FAULT_KINDS``);
* ``store`` -- the chaos store (a faulty ``memory://`` store, or a wrapper of a real one);
* ``faults`` -- one injector per fault kind;
* ``driver`` -- DAG runs of the cycle tasks with Airflow-like retries;
* ``invariants`` -- the checkers; ``observe`` -- read-only views they use;
* ``runner`` -- reference run, one schedule, many schedules, the summary;
* ``report`` -- the summary as text / Markdown (``epochal chaos``).
"""
