"""The ``epochal`` argument parser: every command and option with a one-line help, and every
mistake answered in one line naming the thing and the remedy (exit code 2).

Mistakes and their answers::

    epochal chekpoints list ...      epochal: unknown command 'chekpoints': did you mean checkpoints? ...
    epochal run --exector local      epochal run: unknown option --exector: did you mean --executor? ...
    epochal run --executor lcoal     epochal run: --executor 'lcoal' is not a choice: did you mean local? ...
    epochal checkpoints list         epochal checkpoints list: the following arguments are required: --job ...

The command tree itself is ``spark_jobs.commands.tree``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from state_store.core import killpoints
from state_store.faults import parse_fault

COMMAND = "COMMAND"
_INVALID_CHOICE = re.compile(
    r"^argument (?P<arg>[^:]+): invalid choice: (?P<value>'.*?') \(choose from (?P<choices>.*)\)$"
)


class EpochalParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line with a "did you mean" (never the usage block)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        self.options: list[str] = []
        self.commands: dict[str, EpochalParser] = {}
        self._seen: list[str] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.options.extend(action.option_strings)
        return action

    def add_commands(self, title: str, dest: str) -> Callable[..., EpochalParser]:
        """A subparser group; the returned ``add(name, summary, func)`` records each command."""
        group = self.add_subparsers(title=title, dest=dest, metavar=COMMAND, required=True)

        def add(
            name: str, summary: str, func: Callable[[argparse.Namespace], int] | None = None
        ) -> EpochalParser:
            sub = group.add_parser(name, help=summary, description=summary[:1].upper() + summary[1:] + ".")
            if func is not None:
                sub.set_defaults(func=func)
            self.commands[name] = sub
            return sub

        return add

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            unknown = self._first_unknown_option()
            if unknown is not None:  # "--jbo x": the typo, not the missing --job, is the news
                self.unknown_option(unknown)
        self.exit(2, f"{self.prog}: {self._explain(message)}\n")

    def _explain(self, message: str) -> str:
        m = _INVALID_CHOICE.match(message)
        if m is None:
            return f"{message} (see '{self.prog} --help')"
        value = m.group("value")[1:-1]
        choices = re.findall(r"'([^']*)'", m.group("choices"))
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        arg = m.group("arg")
        what = f"unknown command {value!r}" if arg == COMMAND else f"{arg} {value!r} is not a choice"
        return f"{what}: {hint}(choose from {', '.join(choices)})"

    def unknown_option(self, flag: str) -> NoReturn:
        close = difflib.get_close_matches(flag, [o for o in self.options if o.startswith("--")], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        self.exit(2, f"{self.prog}: unknown option {flag}: {hint}(see '{self.prog} --help')\n")

    def _first_unknown_option(self) -> str | None:
        for token in self._seen:
            if token == "--":
                break
            flag = token.split("=", 1)[0]
            if flag.startswith("--") and not any(o.startswith(flag) for o in self.options):
                return flag  # (a prefix of a known option is argparse's abbreviation)
        return None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._seen = list(sys.argv[1:] if args is None else args)  # for the errors
        return super().parse_known_args(args, namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._unrecognized(parsed, extras)
        return parsed

    def _unrecognized(self, parsed: argparse.Namespace, extras: list[str]) -> NoReturn:
        parser: EpochalParser = self
        for dest in ("command", "action"):  # the (sub-)subcommand that was parsing
            name = getattr(parsed, dest, None)
            if isinstance(name, str) and name in parser.commands:
                parser = parser.commands[name]
        first = extras[0]
        if first.startswith("-"):
            parser.unknown_option(first.split("=", 1)[0])
        parser.exit(2, f"{parser.prog}: unexpected argument {first!r} (see '{parser.prog} --help')\n")


def fault_spec(value: str) -> str:
    """``--fault KILL_POINT[@CHECKPOINT_ID]``, checked while parsing."""
    try:
        point, _ = parse_fault(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("EPOCHAL_FAULT=", "")) from None
    if point not in killpoints.ALL:
        close = difflib.get_close_matches(point, killpoints.ALL, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise argparse.ArgumentTypeError(
            f"kill point {point!r} does not exist: {hint}use one of {', '.join(killpoints.ALL)}"
        )
    return value


def clock_options(p: argparse.ArgumentParser, *, default_help: str, what: str = "per epoch") -> None:
    """``--clock``, ``--time-step-ms`` and ``--replay-cut`` (checked together by
    ``spark_jobs.commands.common.clock_choice``; docs/clocks.md)."""
    p.add_argument(
        "--clock",
        choices=["wall", "simulated"],
        default=None,
        help=f"the job's clock: wall (real time) or simulated (moves --time-step-ms {what}); a job keeps "
        f"the clock of its first run and another one is refused (default: {default_help})",
    )
    p.add_argument(
        "--time-step-ms",
        type=int,
        default=None,
        metavar="MS",
        help=f"simulated time {what}; alone, it means --clock simulated",
    )
    p.add_argument(
        "--replay-cut",
        action="store_true",
        help="simulated clock, step 0: re-read the input cut of the last trigger (replays a crashed "
        "epoch's cut)",
    )
