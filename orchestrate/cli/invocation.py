"""What every command is given besides its options: the torchrun TARGET, where to print, and
the command line itself (recorded with a run)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import IO, Any, Sequence

from orchestrate.config.user_env import mask_env_options
from orchestrate.text import for_terminal


@dataclass
class Invocation:
    """One call of ``python -m orchestrate``.

    Attributes:
        argv: Its arguments, as given.
        target: What follows ``--``: the script or ``-m MODULE`` and its arguments.
        out: Where the command prints.
        client: The Docker engine's client; the environment's engine, connected on first use,
            when None.
        verbose: ``-v``: debug logging, and every line of the nodes on the console (torchrun's
            INFO records and failure report, every redraw of a progress bar).
    """

    argv: Sequence[str]
    target: Sequence[str]
    out: IO[str]
    client: Any = None
    verbose: bool = False

    def engine(self) -> Any:
        """The engine's client (the one given, or the environment's)."""
        if self.client is None:
            from orchestrate.engine.client import connect

            self.client = connect()
        return self.client

    def say(self, line: str) -> None:
        """Print one line now (what a command says while it waits on the engine)."""
        print(for_terminal(line, self.out), file=self.out, flush=True)

    @property
    def command_line(self) -> str:
        """The command as it is recorded: the values of ``--env`` masked (they may be secrets)."""
        return "python -m orchestrate " + shlex.join(mask_env_options(self.argv))
