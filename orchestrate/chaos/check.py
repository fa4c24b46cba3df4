"""The chaos check: the job undisturbed, then the same job with faults drawn from a seed, once
per trial; the verdicts.

1. The work directory is copied once per run, as it is, so that one run's checkpoints never
   leak into another; ``--compare`` files come from each run's own copy.
2. Run 1, the reference: the job undisturbed. Every run uses the elastic c10d rendezvous (its
   store in a container of the run's own where a kind aims at the store:
   :func:`chaos_rendezvous`), so the faults are the only difference between them. Its steps, and
   the first file it wrote in its work directory, say where faults can test a resume.
3. Each trial (seeds S to S+K-1): a schedule drawn in training time
   (:mod:`orchestrate.chaos.schedule`), the job run with it, what each fault struck and what
   the job redid (:mod:`orchestrate.chaos.attempts`), the files and per-step metrics compared.
4. The verdicts (:mod:`orchestrate.chaos.verdict`): each recorded in its trial's directory
   (``chaos.json``) and shown on its report page, which links to the reference's.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Optional, Sequence, Union

from orchestrate.chaos.attempts import attempts_of, ended_at, job_steps, one_ranks_records, steps_redone, strikes
from orchestrate.chaos.compare import compare_files
from orchestrate.chaos.schedule import ChaosKind, Reference, chaos_kind, check_drawn_levels, draw_schedule
from orchestrate.chaos.step_metrics import compare_step_metrics
from orchestrate.node.params_digest import STEP_DIGEST_ENV
from orchestrate.chaos.verdict import ChaosResult, ChaosVerdict, FileComparison, held_before_note
from orchestrate.config.fault_spec import FaultAction
from orchestrate.config.request import RunRequest
from orchestrate.errors import UsageError
from orchestrate.interrupts import SignalInterrupt
from orchestrate.launch.run import Run, new_run_id, run_and_report
from orchestrate.outcome.model import RunResult, WrittenFile
from orchestrate.outcome.progress import ProgressRecord, read_all
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.plan.make import node_name
from orchestrate.report.page import write_report_quietly
from orchestrate.text import listed

CHAOS_FILE = "chaos.json"
# A chaos check's directory under a runs directory (``chaos-<run id>``): its copies and runs.
CHAOS_DIR = re.compile(r"chaos-\d{8}-\d{6}-[0-9a-f]{6}")
# Restarts an elastic run may use beyond one per fault: a fault is one recovery, and a little slack.
SPARE_RESTARTS = 2
# How far behind a worker's clock a file's modification time may be: the kernel stamps it from its
# coarse clock, up to a tick behind (4 ms at HZ=250, 10 at HZ=100). Measured here: a save begun
# 1.3 ms after a step's report had a modification time 3.9 ms before it.
MTIME_BEHIND_S = 0.02
# What a --compare file a run did not write is: its copy of the work directory's own.
LEFT_AS_IT_WAS = "the file there is the work directory's own, from before the check, unchanged"


def not_made(first: int, last: int) -> str:
    """``run 3 is not made``, ``runs 2 to 4 are not made`` (pure)."""
    return f"run {last} is not made" if first == last else f"runs {first} to {last} are not made"


class ChaosCheck:
    """One chaos check of a job (see the module's text)."""

    def __init__(self, request: RunRequest, *, faults: int, seed: int,
                 kinds: Sequence[Union[ChaosKind, FaultAction]],
                 compare: tuple[str, ...] = (), rtol: float = 0.0, trials: int = 1, compare_steps: bool = False,
                 max_steps_redone: Optional[int] = None, out: IO[str] = sys.stdout, client: Any = None,
                 command_line: str = "", verbose: bool = False, ends_by: Optional[tuple[float, str]] = None) -> None:
        if faults < 1:
            raise UsageError(f"--faults must be 1 or more, got {faults}")
        if trials < 1:
            raise UsageError(f"--trials must be 1 or more, got {trials}")
        if request.faults:
            raise UsageError("chaos draws its faults itself: drop --fault (or use run --fault)")
        if request.scheduler != "compose" or request.detach or request.keep:
            raise UsageError("chaos runs the job twice in the foreground: no --scheduler slurm, --detach or --keep")
        for path in compare:
            if Path(path).is_absolute() or ".." in Path(path).parts:
                raise UsageError(f"--compare {path}: give a path relative to the work directory")
        if rtol and not compare and not compare_steps:
            raise UsageError(f"--rtol {rtol:g} is the tolerance of --compare and --compare-steps: give one of them")
        self.request = request
        self.count = faults
        self.seed = seed
        self.kinds = tuple(chaos_kind(kind) for kind in kinds)
        self.compare = compare
        self.rtol = rtol
        self.trials = trials
        self.compare_steps = compare_steps
        self.max_steps_redone = max_steps_redone
        self.out = out
        self.client = client
        self.command_line = command_line
        self.verbose = verbose
        self.ends_by = ends_by  # when every run's job must have ended, and why (a test's own time limit)
        self.clock = time.monotonic  # the clock of ends_by

    def say(self, text: str) -> None:
        print(f"[chaos] {text}", file=self.out, flush=True)

    def run(self) -> ChaosResult:
        """The reference and every trial, and the verdicts. An interrupt stops at once
        (KeyboardInterrupt, with the run already torn down)."""
        rendezvous, store_note = chaos_rendezvous(self.request, self.kinds)
        config = Run(rendezvous, out=self.out).check()  # bad input before any copy or run
        check_drawn_levels(self.kinds, node_name(0), config.cpus_per_node, config.link)
        base = Path(self.request.runs_dir).resolve() / f"chaos-{new_run_id()}"  # named as CHAOS_DIR matches
        seeds = [self.seed + k for k in range(self.trials)]
        undisturbed, *with_faults = self.copies(base, ["undisturbed"] + (
            ["with-faults"] if self.trials == 1 else [f"with-faults-seed{seed}" for seed in seeds]))
        # (the workers' hook digests their parameters at each step: a script's steps compared without metrics of its own)
        digest = ((STEP_DIGEST_ENV, "1"),) if self.compare_steps else ()
        elastic = rendezvous.replace(runs_dir=base / "runs", env=self.request.env + digest,
                                     max_restarts=max(self.request.max_restarts or 0, self.count + SPARE_RESTARTS))
        if store_note:
            self.say(store_note)
        if self.request.max_restarts is not None and self.request.max_restarts < elastic.max_restarts:
            self.say(f"--max-restarts {self.request.max_restarts} raised to {elastic.max_restarts}: a restart for"
                     f" each of the {self.count} fault(s), and {SPARE_RESTARTS} to spare")
        runs = 1 + self.trials
        self.say(f"run 1 of {runs}: the job undisturbed, in a copy of the work directory ({undisturbed})")
        reference = self.one_run(elastic.replace(workdir=undisturbed))
        if reference.limited_by:
            self.say(f"{not_made(2, runs)}: {reference.limited_by}")
        if not reference.succeeded:
            return ChaosResult(reference, [ChaosVerdict(self.seed, reference, None, [], rtol=self.rtol)])
        unwritten = unwritten_comparisons(undisturbed, self.compare, reference)
        if unwritten:  # no trial could be compared: say so now, not after every trial has run
            return ChaosResult(reference, [ChaosVerdict(self.seed, reference, None, [], unwritten, rtol=self.rtol)])
        reference_records = read_all(reference.run_dir / PROGRESS_SUBDIR)
        facts = replace(reference_facts(reference, reference_records),
                        held_before=written_again(reference, with_faults[0]))  # a copy no run has touched yet
        self.say(describe_reference(facts))
        if facts.held_before:
            self.say(f"note: {held_before_note(facts.held_before)}")
        verdicts = []
        for number, (seed, workdir) in enumerate(zip(seeds, with_faults), start=2):
            no_time = self.no_time_for_a_trial(reference)
            if no_time:  # it could not end before the test's own limit ends it, unjudged
                self.say(f"{not_made(number, runs)}: {no_time}")
                verdicts = verdicts or [ChaosVerdict(seed, reference, None, [], rtol=self.rtol, facts=facts,
                                                     not_made=no_time)]
                break
            nodes = [node_name(i) for i in range(self.request.nodes)]
            schedule = draw_schedule(seed, self.count, self.kinds, nodes, facts, world_size=config.world_size,
                                     node_cpus=config.cpus_per_node, link=config.link)
            self.say(f"run {number} of {runs}: the same job with {self.count} fault(s) drawn from seed {seed}:"
                     f" {' '.join(str(f) for f in schedule)}")
            disturbed = self.one_run(elastic.replace(workdir=workdir, faults=schedule))
            verdict = self.judge(seed, reference, reference_records, facts, disturbed, [str(f) for f in schedule],
                                 undisturbed, workdir)
            if self.trials > 1:
                print(verdict.format(), file=self.out, flush=True)
            verdicts.append(verdict)
            if disturbed.limited_by and number < runs:  # no time is left for the trials after it
                self.say(f"{not_made(number + 1, runs)}: {disturbed.limited_by}")
                break
        return ChaosResult(reference, verdicts, trials_asked=self.trials)

    def no_time_for_a_trial(self, reference: RunResult) -> str:
        """Why no trial can be made now: less time is left before :attr:`ends_by` than the
        undisturbed run took from its bring-up to its job's end; "" where there is enough (or no
        limit)."""
        if self.ends_by is None:
            return ""
        left = self.ends_by[0] - self.clock()
        needs = reference.timings.bring_up_s + reference.timings.job_s
        if left >= needs:
            return ""
        return f"{self.ends_by[1]} ({max(left, 0.0):.0f} s left, and the undisturbed run took {needs:.0f} s)"

    def judge(self, seed: int, reference: RunResult, reference_records: list[ProgressRecord], facts: Reference,
              disturbed: RunResult, schedule: list[str], undisturbed: Path, workdir: Path) -> ChaosVerdict:
        """One trial's verdict, recorded in its run's directory and shown on its report page."""
        comparisons = self.compared(undisturbed, workdir, disturbed) if disturbed.job_succeeded else []
        records = read_all(disturbed.run_dir / PROGRESS_SUBDIR)
        attempts = attempts_of(records, facts.last_step, completed=disturbed.job_succeeded)
        steps = (compare_step_metrics(reference_records, records, self.rtol, facts.last_step, disturbed.job_succeeded)
                 if self.compare_steps else None)
        struck = strikes(disturbed.faults, attempts, disturbed.writes, records)  # (an attempt from nothing)
        verdict = ChaosVerdict(seed, reference, disturbed, schedule, comparisons, self.rtol, facts=facts,
                               strikes=struck, steps_redone=steps_redone(attempts, facts.step_count, struck),
                               steps_done=sum(a.count for a in attempts) if attempts else None,
                               ended_at_step=ended_at(attempts, records), steps=steps,
                               max_steps_redone=self.max_steps_redone,
                               not_compared=() if disturbed.job_succeeded else self.compare)
        (disturbed.run_dir / CHAOS_FILE).write_text(json.dumps(verdict.record(), indent=2) + "\n")
        write_report_quietly(disturbed.run_dir)  # again, with the schedule and the verdict
        return verdict

    def compared(self, undisturbed: Path, workdir: Path, disturbed: RunResult) -> list[FileComparison]:
        """The ``--compare`` files of the two runs, in the order asked; one the run with faults left
        as its copy held it from before the check (it did not write it) is that, not compared: the
        undisturbed run's file against the work directory's own would match by accident where an
        earlier run of the job wrote it."""
        stale = {path: FileComparison(path, "bytes", False,
                                      problem=f"the run with faults did not write it: {LEFT_AS_IT_WAS}")
                 for path in self.compare if (workdir / path).is_file() and not wrote(disturbed, path)}
        fresh = [path for path in self.compare if path not in stale]
        found = {c.path: c for c in compare_files(self.engine(), self.request.image, undisturbed, workdir, fresh,
                                                   self.rtol, self.run_as())} if fresh else {}
        return [stale.get(path) or found[path] for path in self.compare]

    def one_run(self, request: RunRequest) -> RunResult:
        run = Run(request, out=self.out, client=self.client, command_line=self.command_line, verbose=self.verbose,
                  notes=False, ends_by=self.ends_by)  # (notes: said once, by the check before the first run)
        try:
            result = run_and_report(run, raise_interrupt=True)
            if result.stopped_by:  # a trial stopped from another terminal: the check stops with it
                raise SignalInterrupt(result.signal_number)
            return result
        finally:
            self.client = run.client

    def copies(self, base: Path, names: list[str]) -> list[Path]:
        """Copies of the work directory as it is now, one per name (the runs' own records left out,
        and every other chaos check's copies: a check going on beside this one, its runs directory
        under this work directory, would otherwise be copied while it copies, into itself)."""
        workdir = Path(self.request.workdir).resolve()
        skip = {str(base.parent), str(base)}  # resolved: the runs directory, or this check's own in it

        def ignore(directory: str, names: list[str]) -> list[str]:
            return [n for n in names if os.path.join(directory, n) in skip
                    or (CHAOS_DIR.fullmatch(n) and os.path.isdir(os.path.join(directory, n)))]

        base.mkdir(parents=True)
        copies = [base / name for name in names]
        for copy in copies:
            shutil.copytree(workdir, copy, symlinks=True, ignore=ignore)
        return copies

    def engine(self) -> Any:
        if self.client is None:
            from orchestrate.engine.client import connect

            self.client = connect()
        return self.client

    def run_as(self) -> Optional[str]:
        from orchestrate.config.request import invoking_user

        return invoking_user()


def chaos_rendezvous(request: RunRequest, kinds: Sequence[ChaosKind]) -> tuple[RunRequest, str]:
    """The rendezvous every run of the check uses (pure): the elastic c10d one, with its store in a
    container of the run's own where a kind aims at the store (``pause:store``: under the default
    ``--rdzv-store node0`` the store is node0's torchrun agent, no target of its own); and the line
    that says so where the user did not ask for it ("" otherwise)."""
    on_store = [str(kind) for kind in kinds if kind.on_store]
    if not on_store:
        return request.replace(rdzv="c10d"), ""
    note = "" if request.rdzv_store == "container" else (
        f"every run keeps the rendezvous store in a container of its own (--rdzv-store container), for"
        f" {listed(on_store, 3)} to aim at")
    return request.replace(rdzv="c10d", rdzv_store="container"), note


def reference_facts(result: RunResult, records: list[ProgressRecord]) -> Reference:
    """Where the undisturbed run trained and first saved: its steps, its first write in the work
    directory (the first still there at its end, where any was) and the first step reported after
    it: later than its modification time by more than that time can be behind, so the write surely
    came before that step."""
    attempts = attempts_of(records)
    last = job_steps(attempts[-1]) if attempts else None
    began = attempts[0].job_step(attempts[0].steps[0][0]) if attempts and attempts[0].steps else None
    steps = {"first_step": began, "steps_done": sum(a.count for a in attempts) if last is not None else None}
    kept = [w for w in result.writes or [] if w.kept]  # a temporary file renamed onto a save is no save
    first = kept[0] if kept else result.writes[0] if result.writes else None
    if first is None:
        return Reference(last, result.timings.job_s, **steps)
    reported = reported_writes(first, kept, records)
    surely_before = min([first.time + MTIME_BEHIND_S, *reported])  # a report's time is exact, not coarse
    after = [r.step for r in sorted(one_ranks_records(records), key=lambda r: r.time)
             if r.step is not None and r.time > surely_before]
    first_time = min([first.time, *reported])
    into_s = first_time - result.started_time if result.started_time is not None else None
    return Reference(last, result.timings.job_s, first.path, into_s, after[0] if after else None, **steps)


def reported_writes(first: WrittenFile, kept: list[WrittenFile], records: list[ProgressRecord]) -> list[float]:
    """When the ranks said they began to write ``first`` whole, or a temporary file of it gone by
    the end (:func:`temporary_of`): the work directory's walk dates a file by the modification time
    it had when first seen, every few seconds, so a save made again before the next walk (every 3
    steps of a fast job) is dated to the later one; a rank's report is exact."""
    kept_paths = {w.path for w in kept}
    return [r.time for r in records if r.wrote and (r.wrote == first.path or (
        r.wrote not in kept_paths and temporary_of(r.wrote, first.path)))]


def temporary_of(path: str, save: str) -> bool:
    """Whether ``path`` looks like the temporary file a save renames onto ``save``: beside it, and
    named after it (``ckpt.pt.tmp``, ``.ckpt.pt.tmp``, ``ckpt.tmp``) or as a temporary file
    (``tmpa1b2c3``); not another file beside it (a scratch file of the start-up, ``model_old``)."""
    folder, name = os.path.split(path)
    save_folder, save_name = os.path.split(save)
    if folder != save_folder:
        return False
    stem = os.path.splitext(save_name)[0]
    return (name.startswith(f"{stem}.") or name.startswith(f".{stem}.") or name.startswith(f".{save_name}")
            or "tmp" in name.lower())


def written_again(result: RunResult, untouched: Path) -> tuple[str, ...]:
    """The files a run wrote and kept in its work directory that ``untouched`` (a copy of that
    directory as the check found it) already holds: an earlier run's saves."""
    kept = dict.fromkeys(w.path for w in result.writes or [] if w.kept)
    return tuple(path for path in kept if (untouched / path).is_file())


def describe_reference(facts: Reference) -> str:
    saved = (f"it first wrote {facts.describe_first_write()}" if facts.first_write
             else "it wrote no file in its work directory")
    return f"the undisturbed job: {facts.describe_steps()} in {facts.job_s:.1f} s; {saved}"


def wrote(result: RunResult, path: str) -> bool:
    """Whether the run created or changed ``path`` (relative) in its work directory (True where
    the directory was not followed: not known)."""
    if result.writes is None:
        return True
    return os.path.normpath(path) in {os.path.normpath(w.path) for w in result.writes}


def unwritten_comparisons(undisturbed: Path, paths: tuple[str, ...], reference: RunResult) -> list[FileComparison]:
    """The ``--compare`` files the undisturbed run did not write, each saying what it did write:
    no trial can be compared on them. One it has no such file of (a typo, a path the job never
    writes); one its copy of the work directory held from before the check, which it left as
    it was (a file an earlier run of the job wrote, that this one writes no more); or a
    directory (a checkpoint's), named with the files in it that can be compared instead."""
    written = sorted({w.path for w in reference.writes or []})
    said = f"it wrote {listed(written, 6)}" if written else "it wrote no file in its work directory"

    def problem(path: str) -> str:
        if (undisturbed / path).is_dir():
            inside = [w for w in written if Path(w).is_relative_to(Path(path))]
            return ("a directory: --compare takes files; name those in it to compare ("
                    + (f"it wrote {listed(inside, 3)})" if inside else "the undisturbed run wrote no file in it)"))
        if not (undisturbed / path).is_file():
            return f"the undisturbed run wrote no such file ({said})"
        if not wrote(reference, path):
            return f"the undisturbed run did not write it: {LEFT_AS_IT_WAS} ({said})"
        return ""

    return [FileComparison(path, "bytes", False, problem=f"{why}; no trial was run")
            for path in paths if (why := problem(path))]
