"""The user's environment for every node: ``--env``, ``--env-file`` and ``--copy-env``.

Pure parsing; the CLI reads the file and the host environment and passes their text in.
Precedence, lowest first: ``--env-file``, then ``--copy-env``, then ``--env``. Their values
may be secrets: of a run, only the Compose file (mode 0600) holds them, and every record masks
them; a job written by ``export -o`` holds them too, as a real cluster needs them, in a file of
the same mode.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Iterable, Mapping

from orchestrate.errors import UsageError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# torchrun and the launcher own these: a user value would give ranks a wrong world.
RESERVED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
            "TORCHELASTIC_*", "PET_*", "DDP_RUN_*")
# The image's: the nodes find python3 and torchrun by it, so a value from here leaves them none.
IMAGE_OWNED = ("PATH",)
# What describes this machine's own shell, not a job: a pattern (--copy-env '*') leaves them out,
# and each node keeps its own (HOSTNAME, HOME of the user it runs as); named alone, one is copied.
HOST_OWN = ("PATH", "HOME", "PWD", "OLDPWD", "HOSTNAME", "SHLVL", "_")


def check_name(name: str, origin: str) -> None:
    """Refuse a variable name that is not an identifier, or one the launcher or the image owns."""
    if not _NAME.match(name):
        raise UsageError(f"{origin}: {name!r} is not a variable name (letters, digits, _; not starting with a digit)")
    for reserved in RESERVED:
        if fnmatch.fnmatchcase(name, reserved):
            raise UsageError(f"{origin}: {name} is set by torchrun or the launcher for every rank and cannot be overridden")
    if name in IMAGE_OWNED:
        raise UsageError(f"{origin}: {name} is the node image's, by which the nodes find python3 and torchrun; to add"
                         f" a directory to it, set it in a work-directory Dockerfile (ENV {name}=/your/bin:${{{name}}})")


def parse_assignment(text: str, origin: str = "--env") -> tuple[str, str]:
    """Parse ``KEY=VALUE`` (the value may be empty or contain ``=``).

    Raises:
        UsageError: ``--env: expected KEY=VALUE, e.g. --env WANDB_MODE=offline. Given: ...``
    """
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"{origin}: expected KEY=VALUE, e.g. --env WANDB_MODE=offline. Given: {text!r}")
    check_name(name, origin)
    return name, value


def parse_env_file(text: str, path: str) -> dict[str, str]:
    """Parse an env file as Compose reads one: ``KEY=VALUE`` lines, ``#`` comments, blank lines,
    an optional ``export`` prefix; a value in single quotes taken as it is, one in double quotes
    with ``\\n``, ``\\t``, ``\\"`` and ``\\\\`` escapes, and either followed only by a comment; an
    unquoted value up to a `` #`` comment (a ``#`` with no space before it is the value's).

    Raises:
        UsageError: Naming the file and line of the first bad line (a quote never closed, text
            after a closing quote).
    """
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        origin = f"--env-file {path}:{number}"
        name, value = parse_assignment(line, origin)
        env[name.strip()] = env_file_value(value.strip(), f"{origin}: {name.strip()}")
    return env


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def env_file_value(text: str, origin: str) -> str:
    """One value of an env file's line (see :func:`parse_env_file`), its quotes taken off."""
    if not text or text[0] not in "'\"":
        comment = re.search(r"\s#", text)
        return (text[:comment.start()] if comment else text).rstrip()
    quote, value, at = text[0], [], 1
    while at < len(text) and text[at] != quote:
        if quote == '"' and text[at] == "\\" and at + 1 < len(text):
            value.append(_ESCAPES.get(text[at + 1], text[at:at + 2]))
            at += 2
            continue
        value.append(text[at])
        at += 1
    if at >= len(text):
        raise UsageError(f"{origin}: the value's opening {quote} is never closed (quote it whole, or leave the"
                         " quotes out)")
    rest = text[at + 1:].strip()
    if rest and not rest.startswith("#"):
        raise UsageError(f"{origin}: {rest!r} follows the closing {quote}: quote the value whole")
    return "".join(value)


def copy_env(patterns: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The host variables matching any of ``patterns`` (shell-style: ``NCCL_*``, ``WANDB_*``).

    Raises:
        UsageError: For an empty pattern, or a reserved name among the matches.
    """
    copied: dict[str, str] = {}
    for pattern in patterns:
        if not pattern:
            raise UsageError("--copy-env: expected a variable name or pattern, e.g. --copy-env 'NCCL_*'")
        for name in sorted(environ):
            if fnmatch.fnmatchcase(name, pattern) and not host_own_left_out(name, pattern):
                check_name(name, f"--copy-env {pattern}")
                copied[name] = environ[name]
    return copied


def host_own_left_out(name: str, pattern: str) -> bool:
    """Whether ``pattern``, a pattern and not the name itself, matches ``name`` of this machine's
    own shell (:data:`HOST_OWN`), which it leaves out."""
    return name in HOST_OWN and pattern != name


def copy_env_notes(patterns: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """What to say of each of ``patterns`` that no variable of ``environ`` matches (it copies
    nothing, and a run without the variable it was meant for should not go unremarked), and of
    the variables of this machine's own shell a pattern left out."""
    notes = []
    for pattern in filter(None, patterns):
        matched = [name for name in sorted(environ) if fnmatch.fnmatchcase(name, pattern)]
        left_out = [name for name in matched if host_own_left_out(name, pattern)]
        if not matched:
            notes.append(f"--copy-env {pattern!r}: no variable of this machine's environment matches it; nothing"
                         " copied")
        elif left_out:
            notes.append(f"--copy-env {pattern!r}: left out {', '.join(left_out)}, this machine's own shell's; the"
                         " nodes keep theirs (name one alone to copy it)")
    return notes


def merge_user_env(env_file: Mapping[str, str], copied: Mapping[str, str],
                   explicit: Iterable[tuple[str, str]]) -> dict[str, str]:
    """One environment: ``--env-file``, overridden by ``--copy-env``, overridden by ``--env``."""
    merged = dict(env_file)
    merged.update(copied)
    merged.update(dict(explicit))
    return merged


MASK = "***"


def mask_assignments(text: str, names: Iterable[str]) -> str:
    """``text`` (a command line) with the value of every ``NAME=value`` of ``names`` masked:
    a run writes the user's variables into the Compose file and nowhere else (not into labels,
    ``run.json``, events, ``outcome.json``, the report or the console)."""
    for name in sorted(set(names), key=len, reverse=True):
        escaped = re.escape(name)
        for quote in ("'", '"'):  # shlex.join quotes the whole assignment: 'NAME=a value'
            text = re.sub(rf"{quote}{escaped}=[^{quote}]*{quote}", f"{quote}{name}={MASK}{quote}", text)
        text = re.sub(rf"(?<![\w'\"]){escaped}=(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)", f"{name}={MASK}", text)
    return text


def mask_env_options(argv: Iterable[str]) -> list[str]:
    """A command line's arguments with the value of every ``--env NAME=value`` masked."""
    masked, after_env = [], False
    for arg in argv:
        if after_env and "=" in arg:
            arg = arg.split("=", 1)[0] + "=" + MASK
        elif arg.startswith("--env=") and arg.count("=") >= 2:
            arg = "--env=" + arg[len("--env="):].split("=", 1)[0] + "=" + MASK
        masked.append(arg)
        after_env = arg == "--env"
    return masked
