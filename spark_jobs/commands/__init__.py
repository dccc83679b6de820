"""The ``epochal`` subcommands behind the entry point ``spark_jobs.cli``.

The entry point reads the process environment and the arguments; everything here gets both as
values (``args.env``) and never reads the environment itself (tests/unit/test_layers.py). Layout,
bottom up (imports point down only):

* ``errors``   -- the CLI's own errors (one line on stderr; exit 2 for bad input);
* ``render``   -- tables, times, sizes and JSON for stdout;
* ``common``   -- store URIs (``--store``, ``EPOCHAL_STORE_URI``, plain paths), an existing job's
                  store, the job's lease, kill switches, simulated clocks;
* ``checkpoints``, ``output``, ``running``, ``snapshots``, ``maintenance`` -- one module per group
                  of subcommands, each ``cmd_<name>(args) -> exit code``;
* ``parser``   -- an ArgumentParser whose errors are one line with a "did you mean" for commands,
                  choices, options and kill points;
* ``tree``     -- the command tree: help for every command and option.
"""
