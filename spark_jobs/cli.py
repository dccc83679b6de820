"""The ``epochal`` command line (entry point). Exit codes: 0 ok, 1 failure, 2 bad usage or input.

This module is the only one of the CLI that reads the process environment: ``EPOCHAL_STORE_URI``
(the default of ``--store``), ``EPOCHAL_FAULT``/``EPOCHAL_FAULT_MODE`` (a drill's kill point),
``EPOCHAL_SNAPSHOT_ROOTS`` (where restores may read snapshots) and the Postgres connections of
``PostgresSink``. The commands get it as ``args.env`` (``spark_jobs.commands``).

``main`` in order:

1. parse (a mistake is one line with a "did you mean", exit 2; ``--help`` exits 0);
2. resolve the store: ``--store``, else ``EPOCHAL_STORE_URI``; a plain path is a local folder;
3. run the command; an error of ``state_store.core.errors`` prints one line and exits with its code
   (1 refused or failed, 2 bad input), any other error one line and 1 -- never a traceback;
4. a reader that closed the pipe (``epochal checkpoints show | head``) ends the command quietly
   with the shell's code for it, 141 (128 + SIGPIPE).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

from spark_jobs.commands.common import location, resolve_store
from spark_jobs.commands.errors import AuditFailedError, UsageError
from spark_jobs.commands.render import fmt_ms, format_history
from spark_jobs.commands.tree import build_parser
from state_store.core.errors import EpochalError
from state_store.storage.uri import redact

#: exit code of a command whose reader closed the pipe (what a shell reports for SIGPIPE)
BROKEN_PIPE_EXIT = 141

_fmt_ms = fmt_ms  # the name older callers import

__all__ = ["AuditFailedError", "UsageError", "build_parser", "format_history", "main"]


def _one_line(exc: BaseException) -> str:
    """Errors that list several reasons (restore refusals) print as one line, every
    credential-shaped value redacted (a URI given with a secret in it is never echoed)."""
    lines = (re.sub(r"^- ", "", line.strip()) for line in str(exc).splitlines() if line.strip())
    return redact("; ".join(lines))


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's capture)
        pass


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    environ: Mapping[str, str] = os.environ if env is None else env
    try:
        try:
            args = build_parser(environ).parse_args(argv)
        except SystemExit as exc:  # --help (0) or a usage error already printed (2)
            return int(exc.code or 0)
        args.env = environ
        from spark_jobs.sinks.postgres_conn import environment_resolver, register_connection_resolver

        register_connection_resolver("environment", environment_resolver(environ))  # PostgresSink conn_id
        try:
            if getattr(args, "store_from_env", False):
                args.store = resolve_store(args.store, environ)
            elif getattr(args, "store", None):
                args.store = location(args.store)
            result: int = args.func(args)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return result
        except EpochalError as exc:  # the tree of state_store.core.errors: one line, its exit code
            print(f"epochal: {_one_line(exc)}", file=sys.stderr)
            return exc.exit_code
        except ValueError as exc:
            print(f"epochal: {_one_line(exc)}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            raise
        except Exception as exc:
            print(f"epochal: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
            return 1
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
