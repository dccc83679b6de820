"""A job's life beyond one epoch: snapshots (checkpoints and savepoints as one portable shape),
savepoints (``savepoint.take_savepoint``), restore (plan, import, the restore's commit; its table in
``restore_render``), backfill (fork a job from a savepoint), checks (a checkpoint's validation:
files, checksums, Great Expectations; a failure quarantines it) and pins (checkpoints kept from
retention). Built on ``spark_jobs.runtime`` (the epoch cycle).

Two calls run the other way, lazily, because recovery needs them: the cycle's recovery finishes a
restore that died after its commit (``restore.finish_restore``), and a rescale prints the restore
plan (``restore.job_shape``)."""
