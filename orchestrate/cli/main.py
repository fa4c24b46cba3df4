"""``python -m orchestrate``: the command line, a module per command over the library.

Commands:
    run     run a torchrun job across N simulated nodes (--detach: leave it running)
    plan    print the plan of a run (same as ``run --dry-run``)
    chaos   a resilience check: the job undisturbed, then with faults drawn from a seed; a verdict
    ps      list runs, every user's (--mine: yours) (alias: list)
    logs    print a run's output (-f: follow it)
    attach  follow a run to its end and print its summary
    stacks  where every rank of a running run is now, grouped, and where their collectives part
    debug   this terminal as the pdb of a rank stopped at breakpoint()
    stop    stop a run's nodes, keep their logs and state
    down    remove a run
    prune   remove your runs that ended or lost their launcher (--all-users: everyone's)
    bench   benchmarks across simulated nodes
    fault   inject faults into a run that is already going
    export  write the job for a real cluster (Slurm, Kubernetes)
    report  (re)build a run's report page
    image   build the node image

Exit codes, one rule: 0 success, 1 the job ran and failed, 2 bad input or a broken
environment, 128 + the signal when interrupted.
"""
from __future__ import annotations

import argparse
import difflib
import logging
import shlex
import signal
import sys
from pathlib import Path
from typing import IO, Any, NoReturn, Optional, Sequence

from orchestrate.cli import (attach, bench, chaos, debug, down, export, fault, image, logs, prune, ps, report, run,
                             stacks, stop)
from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import EXIT_USAGE, TARGET_HELP, OneLineParser, split_target
from orchestrate.config.run_config import DEFAULT_TARGET
from orchestrate.cli.output import ReaderAwareOutput
from orchestrate.cli.signals import interrupt_exit_code
from orchestrate.config.run_config import DEFAULT_RUNS_DIR
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import NoSuchRunError, OrchestrateError, UsageError
from orchestrate.text import runs_named

VERBOSE_HELP = ("log debug details, and show every line the nodes print (torchrun's INFO records and failure report,"
                " every redraw of a progress bar)")

# In the order ``--help`` lists them.
COMMANDS = (run, chaos, ps, logs, attach, stacks, debug, stop, down, prune, bench, fault, export, report, image)


def build_parser(parser_class: type[OneLineParser] = OneLineParser) -> OneLineParser:
    """The whole command line of ``python -m orchestrate``."""
    parser = parser_class(
        prog="python -m orchestrate",
        description="Simulate multi-node PyTorch DDP training: N Docker Compose containers, one torchrun node each.",
        epilog=TARGET_HELP,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=parser_class)
    for command in COMMANDS:
        command.add_parsers(sub)
    # after the command too (`run -v`, `image build -v`, as the console's "or -v" notes read): given
    # there, it is the same switch; left out there, the one before the command stands
    for command_parser in parsers_under(parser):
        command_parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    parser.commands = sub.choices  # each command's parser, by its name (and alias)
    return parser


def parsers_under(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser under ``parser``, its subcommands' too (``image build``), once each
    (an alias names the same parser)."""
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if id(child) not in found:
                    found[id(child)] = child
                    found.update({id(p): p for p in parsers_under(child)})
    return list(found.values())


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` chose, its subcommand's where it has one (``image
    build``); ``parser`` itself where none was chosen."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(getattr(args, action.dest, None) or "")
            if child is not None:
                return chosen_parser(child, args)
    return parser


def nearest_option(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """For words the command does not know that start with a misspelt option of its own
    (``--enviroment``, ``--node=2``), the option meant, as " (did you mean --env?)"; "" otherwise
    (a job's words given without their ``--``: the job's hint says where they go)."""
    word = unknown[0].split("=", 1)[0]
    if not word.startswith("--"):
        return ""
    flags = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    started = [flag for flag in flags if word.startswith(flag) and len(flag) > 4]  # --env in --enviroment
    near = difflib.get_close_matches(word, flags, n=1, cutoff=0.75) or sorted(started, key=len)[-1:]
    return f" (did you mean {near[0]}?)" if near else ""


def ended_hint(args: argparse.Namespace) -> str:
    """For a run the engine no longer has whose directory is in the runs directory (a foreground
    run that ended and was torn down, a removed one): where its lines are; "" otherwise."""
    run_id = getattr(args, "run_id", "") or ""
    runs_dir = Path(getattr(args, "runs_dir", None) or DEFAULT_RUNS_DIR)
    try:
        recorded = [entry.name for entry in runs_dir.iterdir() if entry.is_dir()]
    except OSError:
        return ""
    matches = runs_named(run_id, recorded) if run_id else []
    if len(matches) != 1:
        return ""
    return (f"; it ended and was removed, and its logs stay in {runs_dir / matches[0]}"
            f" (python -m orchestrate logs {matches[0]}, report {matches[0]})")


class TrialParser(OneLineParser):
    """The command line, raising its errors instead of printing them: to try a part of it."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def ours_alone(options: list[str]) -> bool:
    """Whether these words are our options and their values, whole (the word after them is not
    one of their values); a required option that comes later is no matter."""
    try:
        return not build_parser(TrialParser).parse_known_args(options)[1]
    except UsageError as exc:
        return str(exc).startswith("the following arguments are required")


def command_of(options: list[str]) -> str:
    """The command the words before ``--`` name (its first word that is no option); "" for none."""
    return next((word for word in options if not word.startswith("-")), "")


def job_hint(options: list[str], target: list[str]) -> str:
    """For a command's job given without its ``--`` (``run --nodes 2 train.py --epochs 3``,
    ``run -m app.toy``), where the ``--`` goes, as a command line ("" when no job is there): the
    job from its first word on (a word after our options whole, not one of their values),
    whatever options of ours its own arguments look like, and what already followed a ``--``."""
    command = command_of(options)
    parser = build_parser(TrialParser).commands.get(command)
    if parser is None or not parser.get_default("takes_target"):
        return ""
    after_command = options.index(command) + 1
    start = next((i for i in range(after_command, len(options))
                  if (not options[i].startswith("-") or options[i] == "-m") and ours_alone(options[:i])), None)
    if start is None:
        return ""
    return (f"; the job goes after --: python -m orchestrate {shlex.join(options[:start])} --"
            f" {shlex.join(options[start:] + target)}")


def job_hinting(options: list[str], target: list[str]) -> type[OneLineParser]:
    """A parser class whose errors (an option argparse does not know, or an abbreviation of ours
    that a job's own option looks like: ``train.py --hang 3``) say where the job's ``--`` goes."""

    class JobHintingParser(OneLineParser):
        def error(self, message: str) -> NoReturn:
            super().error(message + job_hint(options, target))

    return JobHintingParser


def main(argv: Optional[Sequence[str]] = None, out: Optional[IO[str]] = None, client: Any = None) -> int:
    """Run the command line and return its exit code (see the module's text); ``out`` is where
    the commands print (default: standard output, as it is when called, ending the command as
    SIGPIPE would when its reader goes away); ``client`` is the engine to use (default: the
    environment's, connected when a command needs it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options, target = split_target(argv)
    parser = build_parser(job_hinting(options, target))
    args, unknown = parser.parse_known_args(options)
    if unknown:
        command_parser = chosen_parser(parser, args)
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}{nearest_option(command_parser, unknown)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(out)
        return EXIT_USAGE
    if target and not getattr(args, "takes_target", False):
        parser.error(f"{command_of(options)} takes no job after --, got: -- {shlex.join(target)}")
    if ("--" in argv and not target and getattr(args, "takes_target", False)  # (a script's "$@" that was empty)
            and not getattr(args, "sbatch", None)):  # (a batch script of the user's runs no target of ours)
        demo = " ".join(DEFAULT_TARGET)
        chosen_parser(parser, args).error(f"nothing after --: give the job (a script relative to --workdir, or -m"
                                          f" MODULE), or leave the -- out for the demo job ({demo})")
    if out is None:
        out = ReaderAwareOutput(sys.stdout)  # type: ignore[assignment]  # `| head`: ends as SIGPIPE would
    try:
        return handler(args, Invocation(argv, target, out, client, args.verbose))
    except NoSuchRunError as exc:
        print(f"error: {exc}{ended_hint(args)}", file=sys.stderr)
        return exc.exit_code
    except OrchestrateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        if getattr(exc, "signum", None) != signal.SIGPIPE:  # a reader that went away wants no word
            print("interrupted", file=sys.stderr)
        return interrupt_exit_code(exc)
    except engine_errors() as exc:  # the environment, not the job; anything else is a bug, and raised
        print(f"error: engine error: {describe(exc)}", file=sys.stderr)
        return EXIT_USAGE
