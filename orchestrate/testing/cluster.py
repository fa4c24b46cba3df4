"""``ddp_cluster``: run a job across simulated nodes from a test, and get its result.

The object the fixture yields. Each run goes through the library's :class:`~orchestrate.launch.run.Run`,
exactly as ``python -m orchestrate run`` does, and returns its
:class:`~orchestrate.outcome.model.RunResult`. Nothing outlives the test: every run is torn down
at its end, or, with ``--ddp-keep``, kept only when the test failed (for a look), saying how to
remove it.
"""
from __future__ import annotations

import contextlib
import functools
import numbers
import os
import sys
import time
import warnings
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Optional, Union

import pytest

from orchestrate.chaos.check import ChaosCheck
from orchestrate.chaos.schedule import DEFAULT_KINDS, ChaosKind, parse_kinds
from orchestrate.chaos.verdict import ChaosResult
from orchestrate.config.fault_spec import FaultAction

from orchestrate.config.options import positive_seconds
from orchestrate.config.request import RunRequest
from orchestrate.engine.client import connect
from orchestrate.engine.runs import find_run, remove_run
from orchestrate.errors import ImageNotFoundError, OrchestrateError, UsageError
from orchestrate.launch.run import Run, run_and_report
from orchestrate.outcome.model import DCP_METADATA, RunResult
from orchestrate.text import ENDED_APART_HINT, loaded_from_before


# Seconds a run needs after its job's time limit, beyond its nodes' stop grace: the look at every
# rank (3 s), the teardown and the summary.
STOP_MARGIN_S = 10.0


def fails_at_the_tests_line(method: Callable[..., Any]) -> Callable[..., Any]:
    """An error of ours (a keyword ``run`` has not, a value it refuses, a script that is not there,
    a runs directory the disk refuses) fails the test at the test's own line with ``run``'s
    one-line error: it is raised afresh, and pytest leaves this frame out of the traceback
    (``__tracebackhide__``)."""

    @functools.wraps(method)
    def raising_at_the_callers_line(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841  (read by pytest)
        try:
            return method(*args, **kwargs)
        except OrchestrateError as exc:  # (a bad option; a runs directory the disk refuses)
            raise exc.with_traceback(None) from None

    return raising_at_the_callers_line


class DdpCluster:
    """Runs jobs across simulated nodes for one test.

    Args:
        workdir: The default work directory: the directory of the test file that asks.
        runs_dir: Where each run gets its directory of records.
        image: The node image every run uses unless it names one (``--ddp-image``).
        keep_failed: ``--ddp-keep``: keep the nodes of a failing test's runs for a look.
        out: Where the runs' lines go (default: the standard output of the moment, which
            pytest captures and shows for a failing test).
        test_limit: The test's own time limit, once it runs: the clock time at which it ends the
            test, and its seconds (pytest-timeout's, see the plugin), or None. A run then ends
            its job in time to stop its nodes and say where every rank waits before that, and a run the
            limit leaves no time is refused (:meth:`within_the_tests_limit`).
        session_began: When the pytest session began (epoch time), or None: a file a job loaded from
            before its run is warned of only where it was written since (another test's save), not a
            file older than the session (shipped with the tests); None: every such file is.
    """

    def __init__(self, workdir: Path, runs_dir: Path, *, image: Optional[str] = None, keep_failed: bool = False,
                 out: Optional[IO[str]] = None,
                 test_limit: Callable[[], Optional[tuple[float, float]]] = lambda: None,
                 session_began: Optional[float] = None) -> None:
        self.workdir = workdir
        self.session_began = session_began
        self.test_limit = test_limit
        self.runs_dir = runs_dir
        self.image = image
        self.keep_failed = keep_failed
        self.out = out
        self.results: list[RunResult] = []
        self.checks = 0  # chaos checks made

    @fails_at_the_tests_line
    def run(self, target: Union[str, os.PathLike], *args: Union[str, int, float, os.PathLike],
            nodes: Optional[int] = None,
            nproc_per_node: Optional[Union[int, tuple[int, ...]]] = None,
            workdir: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
            faults: Union[str, Iterable[Any]] = (), rdzv: str = "static", timeout: Optional[float] = 600,
            allow_unfired_faults: bool = False, allow_loads_from_before: bool = False,
            **run_options: Any) -> RunResult:
        """Run ``target`` (what ``run`` takes after ``--``: a script relative to ``workdir``
        with its arguments, or ``"-m", "module"``) and return how it ended. Each argument is text;
        a number (numpy's too) or a path is taken as its text (``"--steps", 2`` is ``"--steps", "2"``), and
        anything else (a list given as one argument, a bool, None) is refused at the call.

        Every other option of ``run`` is a keyword, as on the command line (``cpu=True``,
        ``requirements="requirements.txt"``, ``link="1gbe"``, ``memory_per_node="2g"``).
        ``timeout`` is the most the job may run once its nodes are up, seconds above 0 (None: no
        limit; anything else is refused at the call, :func:`job_time_limit`). ``faults``,
        like ``mounts`` and ``copy_env``, takes one spec alone as a list of one
        (``faults="kill-rank:1@step=5"``). A fault asked for that never fired fails the test here
        (:func:`fail_where_a_fault_never_fired`), whatever the job's end, unless
        ``allow_unfired_faults`` is true: the run did not test what the test asked of it. A job that
        loaded a file its work directory held before the run, written since the session began
        (another test's save), is warned of (:func:`warn_where_it_loaded_from_before`) unless
        ``allow_loads_from_before`` is true (a test that saves and then resumes on purpose).

        Raises:
            UsageError: For a bad option (a test that asks the impossible should fail loudly).
            pytest.fail.Exception: For a fault that never fired (not with ``allow_unfired_faults``).
            KeyboardInterrupt: When the test session is interrupted (the run is torn down first).
        """
        options: dict[str, Any] = {**sizes(nodes, nproc_per_node), "rdzv": rdzv,
                                   "workdir": Path(workdir) if workdir is not None else self.workdir,
                                   "env": dict(env or {}), "faults": faults, "runs_dir": self.runs_dir,
                                   **run_options}
        if self.image and "image" not in run_options:
            options["image"] = self.image
        if self.keep_failed:
            options["keep"] = True  # removed at the test's end unless it failed
        if options.get("detach"):
            raise UsageError("ddp_cluster.run follows a run to its end: detach is not for tests")
        command = command_words("ddp_cluster.run", target, args)
        timeout = job_time_limit("ddp_cluster.run", timeout)
        request = self.within_the_tests_limit("ddp_cluster.run", RunRequest.from_options(command, **options))
        words = [repr(a) for a in command] + [f"{k}={v!r}" for k, v in run_options.items()]
        run = Run(request, out=self.out or sys.stdout, command_line=f"ddp_cluster.run({', '.join(words)})",
                  timeout_s=timeout, ends_by=self.ends_by(request.stop_grace))
        # the summary is shown when the test fails; an interrupt stops the session, as pytest would
        with self.images_named(run_options):
            result = run_and_report(run, raise_interrupt=True)
        self.results.append(result)
        if not allow_loads_from_before:
            warn_where_it_loaded_from_before(result, options["workdir"], self.session_began)
        warn_where_collectives_ended_apart(result)
        if not allow_unfired_faults:
            __tracebackhide__ = True  # noqa: F841  (read by pytest as the frame ends: shown at the test's line)
            fail_where_a_fault_never_fired(result)
        return result

    @contextlib.contextmanager
    def images_named(self, run_options: Mapping[str, Any]) -> Iterator[None]:
        """An image that cannot be had is named by the option that asked for it: ``--ddp-image``
        where it is this cluster's (no ``image`` keyword), not ``run``'s ``--image``."""
        try:
            yield
        except ImageNotFoundError as exc:
            if not self.image or "image" in run_options or exc.image != self.image:
                raise
            raise exc.named_by("--ddp-image") from None

    def within_the_tests_limit(self, call: str, request: RunRequest) -> RunRequest:
        """``request`` fitted to the test's own time limit, before anything is brought up: a run ends
        its job the nodes' stop grace and :data:`STOP_MARGIN_S` before that limit, so where that
        leaves it no time the call is refused (it could only fail, after its nodes came up, or be
        cut short by pytest-timeout mid bring-up); where it leaves less than ``ready_timeout``, the
        nodes get only that long to come up, said in one line, so that a slow bring-up is ended
        and torn down by the run before the limit ends the test.

        Raises:
            UsageError: Naming the limit, what the run needs before it, and the way out.
        """
        limit = self.test_limit()
        if limit is None:
            return request
        ends_at, seconds = limit
        needed = request.stop_grace + STOP_MARGIN_S
        left = ends_at - time.monotonic() - needed  # for the bring-up and the job
        if left < 1:
            raise UsageError(f"{call}: the test's own time limit, pytest-timeout's {seconds:g} s, leaves this run no"
                             f" time: it ends its job {needed:g} s before that limit (stop_grace={request.stop_grace:g}"
                             f" s to stop its nodes, {STOP_MARGIN_S:g} s to look at every rank and tear down), and"
                             f" its nodes need up to ready_timeout={request.ready_timeout:g} s to come up before the"
                             f" job runs: give the test a longer limit (@pytest.mark.timeout)")
        if left >= request.ready_timeout:
            return request
        print(f"[ddp-compose] the test's own time limit, pytest-timeout's {seconds:g} s, leaves this run {int(left)} s"
              f" to bring its nodes up and run its job, less than ready_timeout={request.ready_timeout:g} s: its"
              f" nodes get {int(left)} s to come up, so that the run, not the limit, ends a slower bring-up",
              file=self.out or sys.stdout, flush=True)
        return request.replace(ready_timeout=float(int(left)))

    def ends_by(self, stop_grace_s: float) -> Optional[tuple[float, str]]:
        """When a run's job must end for the test's own time limit to leave it time to stop its
        nodes (their grace), look at its ranks and tear down; and why. None without a limit."""
        limit = self.test_limit()
        if limit is None:
            return None
        ends_at, seconds = limit
        return (ends_at - stop_grace_s - STOP_MARGIN_S,
                f"the test's own time limit, pytest-timeout's {seconds:g} s, left it no longer")

    @fails_at_the_tests_line
    def chaos(self, target: Union[str, os.PathLike], *args: Union[str, int, float, os.PathLike], faults: int = 1,
              seed: int = 0, kinds: Union[str, Iterable[Union[str, FaultAction, ChaosKind]]] = DEFAULT_KINDS,
              compare: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]] = (),
              rtol: float = 0.0, trials: int = 1, compare_steps: bool = False,
              max_steps_redone: Optional[int] = None, nodes: Optional[int] = None,
              nproc_per_node: Optional[Union[int, tuple[int, ...]]] = None,
              workdir: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
              **run_options: Any) -> ChaosResult:
        """The ``chaos`` check of ``target``, as ``python -m orchestrate chaos`` runs it: one
        undisturbed run, then ``trials`` runs with ``faults`` faults drawn from seeds ``seed``
        on (``target`` and its arguments as :meth:`run` takes them). Returns the verdict:
        ``.holds``, ``.does_not_hold`` (``not .holds`` is true of an inconclusive verdict too),
        ``.status`` (``HOLDS``, ``DOES NOT HOLD``, ``INCONCLUSIVE``), ``.failures``
        and ``.format()`` (printed too, so a failing test shows it); every run is torn down at
        its end. ``kinds`` is text as ``--kinds`` takes it
        (``"kill,restart"``, ``"kill,pause:store"``) or a list of kinds (``["kill", "restart"]``, :class:`FaultAction`
        members); ``compare`` is one path or a list of them (``"final.pt"``, ``["final.pt", "log.txt"]``).

        Raises:
            UsageError: For a bad option, before any run starts.
            KeyboardInterrupt: When the test session is interrupted (the run is torn down first).
        """
        if run_options.get("rdzv", "c10d") != "c10d":
            raise UsageError(f"ddp_cluster.chaos runs every run elastic (c10d), which its faults need:"
                             f" drop rdzv={run_options['rdzv']!r}")
        command = command_words("ddp_cluster.chaos", target, args)
        kinds, compare = fault_kinds(kinds), compared_paths(compare)
        options: dict[str, Any] = {**sizes(nodes, nproc_per_node), "rdzv": "c10d",
                                   "workdir": Path(workdir) if workdir is not None else self.workdir,
                                   "env": dict(env or {}), "runs_dir": self.runs_dir, **run_options}
        if self.image and "image" not in run_options:
            options["image"] = self.image
        request = self.within_the_tests_limit("ddp_cluster.chaos", RunRequest.from_options(command, **options))
        self.checks += 1
        check = ChaosCheck(request, faults=faults, seed=seed, kinds=kinds, compare=compare, rtol=rtol, trials=trials,
                           compare_steps=compare_steps, max_steps_redone=max_steps_redone,
                           command_line=f"ddp_cluster.chaos({command[0]!r}, ...)",
                           out=self.out or sys.stdout, ends_by=self.ends_by(request.stop_grace))
        with self.images_named(run_options):
            result = check.run()
        print(result.format(), file=self.out or sys.stdout, flush=True)
        return result

    def finish(self, test_failed: bool) -> list[str]:
        """At the test's end: remove the runs kept with ``--ddp-keep`` unless the test failed;
        return what was kept, and each run whose teardown left it behind (its result may still
        have succeeded: the summary that says so is shown only for a failing test), one line each."""
        left = [f"run {r.run_id}: TEARDOWN FAILED (exit code {r.exit_code}, succeeded={r.succeeded}):"
                f" {r.teardown_error}" for r in self.results if r.teardown_error]
        return left + self.finish_kept(test_failed)

    def finish_kept(self, test_failed: bool) -> list[str]:
        kept = [r for r in self.results if self.keep_failed and not r.interrupted]
        unkept = []
        if self.keep_failed and test_failed and self.checks:
            unkept = [f"the chaos check's runs are not kept (--ddp-keep keeps ddp_cluster.run's): their logs and"
                      f" pages are under {self.runs_dir}"]
        if not kept:
            return unkept
        if test_failed:
            return [f"kept run {r.run_id} for a look (its page: {r.report}); remove it with:"
                    f" python -m orchestrate down {r.run_id}" for r in kept] + unkept
        client = connect()
        for result in kept:
            try:
                remove_run(client, find_run(client, result.run_id))
            except UsageError:  # already gone
                pass
        return []


class LoadedFromBeforeWarning(UserWarning):
    """Raised (as a warning) when a run's job loaded a file its work directory held before the
    run: another test's save, left in the test file's directory, that its job resumed from."""


def warn_where_it_loaded_from_before(result: RunResult, workdir: Path, session_began: Optional[float]) -> None:
    """Warn, at the test's line, where the job loaded files the work directory held before the run
    (:attr:`RunResult.loaded_from_before`) that look like another run's output: a test whose job
    resumed from another test's save passed having trained nothing. Such a file was written (its
    modification time as the run ended) since ``session_began``, or is gone; one older than the
    session was shipped with the tests (a pretrained model) and is not warned of. A warning, not a
    failure: a test may mean its job to load what an earlier one saved."""
    # (a checkpoint directory DCP loaded, by its .metadata: DCP writes it last, and a save again leaves the
    # directory's own time as it was)
    others = [path for path in result.loaded_from_before
              if written_since(workdir / path / DCP_METADATA if path.endswith("/") else workdir / path,
                               session_began)]
    if others:
        # (1 here, 2 run, 3 the wrapper that fails at the test's line, 4 the test)
        warnings.warn(f"ddp_cluster.run (run {result.run_id}): {loaded_from_before(others)}; written since the test"
                      f" session began, by another test's run? (workdir=...: a directory of the test's own, e.g. a"
                      f" copy under tmp_path; allow_loads_from_before=True where the test means it)",
                      LoadedFromBeforeWarning, stacklevel=4)


class EndedApartWarning(UserWarning):
    """Raised (as a warning) when a run's job succeeded although its ranks made different
    collectives in a group of them all: a collective paired with another, the job wrong but whole."""


def warn_where_collectives_ended_apart(result: RunResult) -> None:
    """Warn, at the test's line, where the job succeeded with its ranks' collectives apart
    (:attr:`RunResult.ended_apart`): gloo paired one rank's extra broadcast with the others' next
    call, nothing failed, and the test would pass without a word. A warning, not a failure: a test
    of such a job asserts on ``result.ended_apart``, or filters the warning."""
    if result.ended_apart:
        # (1 here, 2 run, 3 the wrapper that fails at the test's line, 4 the test)
        warnings.warn(f"ddp_cluster.run (run {result.run_id}): the job succeeded, but the ranks' collectives ended"
                      f" apart: {result.ended_apart}; hint: {ENDED_APART_HINT}", EndedApartWarning, stacklevel=4)


def written_since(path: Path, began: Optional[float]) -> bool:
    """Whether ``path`` was written at or after ``began`` (epoch time; None: always), or is gone."""
    if began is None:
        return True
    try:
        return path.stat().st_mtime >= began
    except OSError:  # removed by the job: not a file shipped beside the test
        return True


def fail_where_a_fault_never_fired(result: RunResult) -> None:
    """Fail the test, in one line, where a fault it asked for never fired: the run's result
    (``not result.succeeded``, exit code 1) would otherwise pass a test that the fault fails the
    job, though nothing struck it (a fault at a step the job never reached). The faults and why
    each did not fire are the result's own (:attr:`RunResult.unfired_faults`).

    Raises:
        pytest.fail.Exception: Naming each fault and why it did not fire.
    """
    __tracebackhide__ = True  # noqa: F841  (read by pytest)
    unfired = result.unfired_faults
    if not unfired:
        return
    job = ("the job itself succeeded" if result.job_succeeded
           else "the job failed: its summary is in the captured output")
    pytest.fail(f"ddp_cluster.run: {len(unfired)} fault(s) asked for never fired, so the run did not test what the test"
                f" asked ({job}): {'; '.join(f.describe() for f in unfired)}: give each a step or a time the job"
                f" reaches, or allow_unfired_faults=True where a fault that does not fire is what the test expects")


def sizes(nodes: Optional[int], nproc_per_node: Optional[Union[int, tuple[int, ...]]]) -> dict[str, int]:
    """The sizes a test gave; those it did not are the run's own defaults (``run``'s, as on the
    command line)."""
    return {k: v for k, v in (("nodes", nodes), ("nproc_per_node", nproc_per_node)) if v is not None}


def command_words(call: str, target: Any, args: tuple[Any, ...]) -> tuple[str, ...]:
    """The job's command as text: ``target`` and its arguments, a number (of any real kind: an int,
    a float, numpy's ``int64`` or ``float32``) or a path taken as its text, as a command line gives
    it. Anything else is refused here, before any run starts: the engine refused it only once the
    nodes were asked for, with five tries at the teardown (``services.node0.command.34 must be a
    string``).

    Raises:
        UsageError: Naming the argument, its value and its type.
    """
    words = []
    for position, word in enumerate((target, *args)):
        if isinstance(word, (str, os.PathLike)):
            words.append(os.fspath(word))
        elif isinstance(word, numbers.Real) and not isinstance(word, bool):  # numpy's too (np.int64 is no int)
            words.append(str(word))
        else:
            which = "the target" if position == 0 else f"argument {position} after the target"
            raise UsageError(f"{call}: {which}, {word!r}, is of type {type(word).__name__}: each of the script's"
                             f" arguments is text of its own (a number or a path is taken as its text; a list goes"
                             f" as *args)")
    return tuple(words)


def job_time_limit(call: str, timeout: Any) -> Optional[float]:
    """``ddp_cluster.run``'s ``timeout``: seconds above 0, a number of any real kind (numpy's too),
    as ``positive_seconds`` takes a duration's text, or None (no limit). Anything else is refused
    here, before any run starts: 0 or less ended the job as TIMED OUT the moment it began, after
    its nodes came up; a bool was taken as 1 s (True) or 0 s (False); text failed with a TypeError
    in the launcher's frames.

    Raises:
        UsageError: Naming the value, and its type where it is no number.
    """
    if timeout is None:
        return None
    if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool):
        raise UsageError(f"{call}: timeout, {timeout!r}, is of type {type(timeout).__name__}: it is the job's time"
                         f" limit in seconds, a number above 0 (None: no limit)")
    text = str(timeout) if isinstance(timeout, (int, float)) else repr(float(timeout))  # (a Fraction's "1/2": 0.5)
    try:
        return positive_seconds(text)
    except UsageError as exc:
        raise UsageError(f"{call}: timeout: {exc} (None: no limit)") from None


def fault_kinds(kinds: Union[str, Iterable[Union[str, FaultAction, ChaosKind]]]) -> tuple[ChaosKind, ...]:
    """``ddp_cluster.chaos``'s ``kinds``, parsed as ``--kinds`` is: text (``"kill,restart"``) or a
    list of kinds (their names or :class:`FaultAction` members), refused at the call when it is
    neither: a kind that is not one failed only when the undisturbed run was spent.

    Raises:
        UsageError: For what is not a kind, naming it.
    """
    if isinstance(kinds, str):  # (a FaultAction is one too)
        return parse_kinds(kinds)
    try:
        given = list(kinds)
    except TypeError:
        raise UsageError(f"ddp_cluster.chaos: kinds takes fault kinds, e.g. 'kill,restart' or ['kill', 'restart'],"
                         f" got {kinds!r}") from None
    given = [str(kind) if isinstance(kind, ChaosKind) else kind for kind in given]
    for kind in given:
        if not isinstance(kind, str):
            raise UsageError(f"ddp_cluster.chaos: kinds takes fault kinds, e.g. 'kill,restart' or ['kill', 'restart'],"
                             f" got {kind!r}, of type {type(kind).__name__}")
    return parse_kinds(",".join(given))


def compared_paths(compare: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]) -> tuple[str, ...]:
    """``ddp_cluster.chaos``'s ``compare``: one path alone is one (``"final.pt"``: once split into
    its characters), as ``faults`` and ``mounts`` of ``run`` take one; a list gives each.

    Raises:
        UsageError: For what is not a path, naming it.
    """
    if isinstance(compare, (str, os.PathLike)):
        compare = (compare,)
    try:
        given = list(compare)
    except TypeError:
        raise UsageError(f"ddp_cluster.chaos: compare takes a path or a list of paths, got {compare!r}") from None
    for path in given:
        if not isinstance(path, (str, os.PathLike)):
            raise UsageError(f"ddp_cluster.chaos: compare takes a path or a list of paths, got {path!r},"
                             f" of type {type(path).__name__}")
    return tuple(os.fspath(path) for path in given)
