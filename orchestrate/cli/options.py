"""The command line's side of the option definitions (:mod:`orchestrate.config.options`): the
parser whose errors are one line, the options added to a command, and the request they make."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, NoReturn, Optional, Sequence

from orchestrate.config.options import Option
from orchestrate.config.request import RunRequest
from orchestrate.config.run_config import DEFAULT_TARGET
from orchestrate.errors import UsageError

EXIT_USAGE = 2
# What every command that takes a run's id takes (engine.runs.find_run, outcome.run_dirs.find_run_dir).
RUN_ID_HELP = "its id, or a unique start or end of it (its last part, 728639)"
# --runs-dir of a command that acts on one run (stop, down), as ps and prune take it
ONE_RUN_RUNS_DIR_HELP = ("only a run whose directory is in DIR (as `run --runs-dir` named it): a run elsewhere is"
                         " refused, and a part of an id that a run elsewhere shares names the one in DIR; refused"
                         " where DIR is no directory and no run in the engine names it (default: any directory)")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunRequest)}
# How a command that runs a job shows it in its usage line: the job is split off at ``--`` before
# the options are parsed, so argparse itself never sees it.
TARGET_USAGE = "[-- TARGET ...]"
TARGET_HELP = ("TARGET (after --) is what torchrun runs: a script relative to --workdir with its arguments, or"
               f" -m MODULE [ARGS]. Default: {' '.join(DEFAULT_TARGET)}.")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and exit 2."""

    commands: dict[str, argparse.ArgumentParser]  # the top parser's: each command's parser, by name

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")

    def format_usage(self) -> str:
        return self.with_target_usage(super().format_usage())

    def format_help(self) -> str:
        return self.with_target_usage(super().format_help())

    def with_target_usage(self, text: str) -> str:
        """``text`` (usage first) with a job command's ``[-- TARGET ...]`` at the end of its usage
        lines, on the last one where it fits, else on a line of its own indented as theirs."""
        if not self.get_default("takes_target"):
            return text
        usage, blank, rest = text.partition("\n\n")
        lines = usage.rstrip("\n").split("\n")
        if len(lines) > 1:
            indent = len(lines[1]) - len(lines[1].lstrip())
        else:
            indent = len(f"usage: {self.prog} ")
        if len(lines[-1]) + 1 + len(TARGET_USAGE) <= self._get_formatter()._width:
            lines[-1] += " " + TARGET_USAGE
        else:
            lines.append(" " * indent + TARGET_USAGE)
        return "\n".join(lines) + (blank + rest if blank else "\n")


def argparse_type(parse: Callable[[str], Any], flag: str) -> Callable[[str], Any]:
    """An argparse ``type`` from a parser that raises UsageError: the message without the
    option's name (argparse puts it in front)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except UsageError as exc:
            message = str(exc)
            for prefix in (f"{flag}: ", f"invalid {flag} "):
                if message.startswith(prefix):
                    message = message[len(prefix):]
            raise argparse.ArgumentTypeError(message) from None

    return convert


def add_options(parser: Any, options: Sequence[Option], *, help_overrides: Optional[dict[str, str]] = None) -> None:
    """Add ``options`` to a parser or argument group, with RunRequest's defaults."""
    for option in options:
        kwargs: dict[str, Any] = {"dest": option.dest, "help": (help_overrides or {}).get(option.dest, option.help)}
        default = _DEFAULTS.get(option.dest)
        if option.switch:
            kwargs.update(action="store_true", default=bool(default))
        else:
            kwargs["default"] = [] if option.repeat else default
            if option.repeat:
                kwargs["action"] = "append"
            if option.parse is not None:
                kwargs["type"] = argparse_type(option.parse, option.flag)
            if option.metavar:
                kwargs["metavar"] = option.metavar
            if option.choices:
                kwargs["choices"] = option.choices
        parser.add_argument(*option.aliases, option.flag, **kwargs)


def request_from_args(args: argparse.Namespace, target: Sequence[str], **changes: Any) -> RunRequest:
    """The RunRequest the parsed options make (options a command does not have keep their defaults)."""
    values = {}
    for name in _DEFAULTS:
        if name != "target" and hasattr(args, name):
            value = getattr(args, name)
            values[name] = tuple(value) if isinstance(value, list) else value
    return RunRequest(target=tuple(target), **{**values, **changes})


def split_target(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split argv at the first ``--``: options before, torchrun TARGET after."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []
