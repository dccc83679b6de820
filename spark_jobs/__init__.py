"""Epochal's Spark side (docs/concepts.md, "Where the code lives"): ``api`` (the job API and one
frozen spec per step kind), ``runtime`` (one epoch: the plan, subtasks, operators, the epoch
cycle), ``lifecycle`` (snapshots, savepoints, restore, backfill, checks, pins), ``tools``
(inspect, report, protocol demo), ``sources`` and ``sinks``, and the entry points ``jobs``
(``run_epoch`` under spark-submit) and ``cli`` (``epochal``). Never imports Airflow."""
