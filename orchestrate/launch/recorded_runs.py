"""Runs found in the engine, with what their own record says that the engine cannot: the nodes
a ``lose`` fault took for good (the engine sees a node killed, and the job went on without it),
and the exit code the launcher ended with (a job whose nodes all exited 0 still failed where a
fault asked for never fired). ``ps``, ``stop``, ``prune``, ``attach`` and ``debug`` name a run's
state by them, as its summary did; ``stop`` and ``down`` find a run in a ``--runs-dir`` here, and ``report``
a run's directory, where the engine's labels put it or in a ``--runs-dir``."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from orchestrate.engine.errors import engine_errors
from orchestrate.engine.remains import RunRemains
from orchestrate.engine.runs import RunInfo, RunState, find_run, list_runs, require_run_id, run_named, run_state
from orchestrate.errors import EngineError, EngineUnavailableError, NoSuchRunError, UsageError
from orchestrate.faults.in_effect import lost_nodes
from orchestrate.outcome.events import launcher_exit_code, read_events
from orchestrate.outcome.run_dirs import PLAN_FILE, find_run_dir
from orchestrate.text import no_run_named

log = logging.getLogger(__name__)


def run_as_recorded(run: RunInfo) -> RunInfo:
    """The run, if it ended, with its record's lost nodes and launcher's exit code (a run that
    still runs needs neither: it is running, whatever they say; one with no directory has none)."""
    if not run.state.ended or not run.run_dir.name:
        return run
    events = read_events(run.run_dir)  # (read once: the losses and the launcher's ending are both there)
    return replace(run, lost=lost_nodes(run.run_dir, events), launcher_exit=launcher_exit_code(events))


def ended_as_recorded(run: RunInfo) -> Optional[RunState]:
    """How the run ended where a launcher that followed it has said so, whatever its containers
    still do (a kept Slurm run's cluster outlives its job); None where none has said."""
    code = launcher_exit_code(read_events(run.run_dir)) if run.run_dir.name else None
    return None if code is None else run_state(run.detached, run.launcher_alive, [], code)


def runs_as_recorded(runs: list[RunInfo]) -> list[RunInfo]:
    """Each run as :func:`run_as_recorded` gives it."""
    return [run_as_recorded(run) for run in runs]


def check_runs_dir_named(runs_dir: Optional[Path], runs: list[RunInfo]) -> None:
    """Refuse a ``--runs-dir`` that is no directory here and that no run in the engine names as
    its own (a typo would prune or list nothing, and say so with exit 0); one whose runs are still
    in the engine after it was deleted is taken as named.

    Raises:
        UsageError: Saying what the directory is not.
    """
    if runs_dir is None or runs_dir.is_dir() or any(in_runs_dir(run, runs_dir) for run in runs):
        return
    what = "is not a directory" if runs_dir.exists() else "does not exist"
    raise UsageError(f"--runs-dir {runs_dir} {what}, and no run in the engine has its directory there")


def in_runs_dir(run: Union[RunInfo, RunRemains], runs_dir: Optional[Path]) -> bool:
    """Whether the run's directory (or the directory of the run that left ``run``) lies in
    ``runs_dir`` (every run's does when it is None)."""
    return runs_dir is None or run.run_dir.parent == runs_dir.resolve()


def find_run_in(client: Any, run_id: str, runs_dir: Optional[Path]) -> RunInfo:
    """The run ``run_id`` names among those whose directory is in ``runs_dir`` (``--runs-dir``, as
    ``ps`` and ``prune`` take it; every run's where None): a part of an id that several runs in the
    engine share names the one of them there.

    Raises:
        UsageError: When ``runs_dir`` is no directory and no run names it, when the run named has its
            directory elsewhere, or when the id names several runs there.
        NoSuchRunError: When the engine has no run by that id.
    """
    if runs_dir is None:
        return find_run(client, run_id)
    require_run_id(run_id)
    runs = list_runs(client)
    check_runs_dir_named(runs_dir, runs)
    try:
        return run_named(run_id, [run for run in runs if in_runs_dir(run, runs_dir)], f"in {runs_dir}")
    except NoSuchRunError:
        elsewhere = run_named(run_id, runs, "in the engine")  # (none there: the engine's word, where it has none)
    raise UsageError(f"run {elsewhere.run_id} is not in --runs-dir {runs_dir}: its directory is {elsewhere.run_dir}")


def run_dir_named(engine: Callable[[], Any], run_id: str, runs_dir: Path, runs_dir_given: bool = False) -> Path:
    """The directory of the run ``run_id`` names: a path to one; else, for a run still in the engine
    (``engine()`` connects to it), where its labels put it, wherever ``run --runs-dir`` made it; else
    the run's in ``runs_dir`` (``runs_dir_given``: the user named it, so a run in neither is not told
    to name one).

    Raises:
        NoSuchRunError: For a run neither has.
        UsageError: For a run id that names several runs.
    """
    if (Path(run_id) / PLAN_FILE).is_file():
        return Path(run_id)
    try:
        run = find_run(engine(), run_id)
    except (NoSuchRunError, EngineUnavailableError, EngineError, *engine_errors()) as not_there:
        log.debug("run %s not found in the engine: %s", run_id, not_there)
        try:
            return find_run_dir(runs_dir, run_id)
        except NoSuchRunError as not_recorded:
            if not isinstance(not_there, NoSuchRunError):  # the engine cannot be asked: what the directory says is all
                raise
            middle = tuple(sorted({*not_there.in_middle, *not_recorded.in_middle}))
            see = ("see `python -m orchestrate ps`" if runs_dir_given
                   else "see `python -m orchestrate ps`; for a run no longer in the engine, give its --runs-dir")
            raise NoSuchRunError(no_run_named(run_id, f"in the engine or in {runs_dir}", see, middle), middle) from None
    if run.run_dir.name and (run.run_dir / PLAN_FILE).is_file():
        return run.run_dir
    return find_run_dir(runs_dir, run.run_id)  # (its labels name no directory here: another host's, or deleted)
