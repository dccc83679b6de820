"""One epoch on Spark: the epoch plan shipped to every task (``plan``), the subtasks
(``subtask``: ``open_subtask`` does the I/O; ``source_subtask``, ``keyed_subtask``, ``chain``,
``acks``, ``channel_state``, ``subtask_sinks``), the operators (``operators``, built from the step
specs by ``operators.build``), the executors (in process or on Spark) and the epoch cycle
(``cycle``: trigger, run, complete, notify, retention). Nothing here reads the environment."""
