"""The chaos check: the job undisturbed, then the same job with faults drawn from a seed; the
verdict.

1. The work directory is copied twice, as it is, so that one run's checkpoints never leak into
   the other; ``--compare`` files come from each run's own copy.
2. Run 1, the reference: the job undisturbed. Both runs use the elastic c10d rendezvous, so the
   faults are the only difference between them.
3. The schedule: N faults drawn from the seed, at the steps the reference reported, else at
   times spread over its duration (:mod:`orchestrate.chaos.schedule`).
4. Run 2: the same job with the schedule.
5. The verdict (:mod:`orchestrate.chaos.verdict`): recorded in run 2's directory
   (``chaos.json``) and shown on its report page.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import IO, Any, Optional

from orchestrate.chaos.compare import compare_files
from orchestrate.chaos.schedule import Reference, draw_schedule
from orchestrate.chaos.verdict import ChaosVerdict
from orchestrate.config.fault_spec import FaultAction
from orchestrate.config.request import RunRequest
from orchestrate.errors import UsageError
from orchestrate.interrupts import SignalInterrupt
from orchestrate.launch.run import Run, new_run_id
from orchestrate.outcome.model import RunResult
from orchestrate.outcome.progress import ProgressReader
from orchestrate.outcome.summary import format_summary
from orchestrate.plan.layout import PROGRESS_SUBDIR
from orchestrate.plan.make import node_name
from orchestrate.report.page import write_report_quietly

CHAOS_FILE = "chaos.json"


class ChaosCheck:
    """One chaos check of a job (see the module's text)."""

    def __init__(self, request: RunRequest, *, faults: int, seed: int, kinds: tuple[FaultAction, ...],
                 compare: tuple[str, ...] = (), rtol: float = 0.0, out: IO[str] = sys.stdout, client: Any = None,
                 command_line: str = "", verbose: bool = False) -> None:
        if faults < 1:
            raise UsageError(f"--faults must be 1 or more, got {faults}")
        if request.faults:
            raise UsageError("chaos draws its faults itself: drop --fault (or use run --fault)")
        if request.scheduler != "compose" or request.detach or request.keep:
            raise UsageError("chaos runs the job twice in the foreground: no --scheduler slurm, --detach or --keep")
        for path in compare:
            if Path(path).is_absolute() or ".." in Path(path).parts:
                raise UsageError(f"--compare {path}: give a path relative to the work directory")
        self.request = request
        self.count = faults
        self.seed = seed
        self.kinds = kinds
        self.compare = compare
        self.rtol = rtol
        self.out = out
        self.client = client
        self.command_line = command_line
        self.verbose = verbose

    def say(self, text: str) -> None:
        print(f"[chaos] {text}", file=self.out, flush=True)

    def run(self) -> ChaosVerdict:
        """Both runs and the verdict. An interrupt stops at once (KeyboardInterrupt, with the
        run already torn down)."""
        config = Run(self.request.replace(rdzv="c10d"), out=self.out).check()  # bad input before any copy or run
        base = Path(self.request.runs_dir).resolve() / f"chaos-{new_run_id()}"
        undisturbed, with_faults = self.copies(base)
        elastic = self.request.replace(rdzv="c10d", runs_dir=base / "runs",
                                       max_restarts=max(self.request.max_restarts or 0, self.count, 3))
        self.say(f"run 1 of 2: the job undisturbed, in a copy of the work directory ({undisturbed})")
        reference = self.one_run(elastic.replace(workdir=undisturbed))
        if not reference.succeeded:
            return ChaosVerdict(self.seed, reference, None, [], rtol=self.rtol)
        facts = Reference(last_step(reference), reference.timings.job_s)
        nodes = [node_name(i) for i in range(self.request.nodes)]
        schedule = draw_schedule(self.seed, self.count, self.kinds, nodes, facts,
                                 world_size=config.nodes * config.nproc_per_node)
        at = (f"steps 2..{facts.last_step - 1}" if facts.last_step is not None and any(f.at_step for f in schedule)
              else f"{facts.job_s:.0f} s of the job")
        self.say(f"run 2 of 2: the same job with {self.count} fault(s) drawn from seed {self.seed} over {at}:"
                 f" {' '.join(str(f) for f in schedule)}")
        disturbed = self.one_run(elastic.replace(workdir=with_faults, faults=schedule))
        comparisons = compare_files(self.engine(), self.request.image, undisturbed, with_faults, list(self.compare),
                                    self.rtol, self.run_as()) if disturbed.job_succeeded else []
        verdict = ChaosVerdict(self.seed, reference, disturbed, [str(f) for f in schedule], comparisons, self.rtol)
        (disturbed.run_dir / CHAOS_FILE).write_text(json.dumps(verdict.record(), indent=2) + "\n")
        write_report_quietly(disturbed.run_dir)  # again, with the schedule and the verdict
        return verdict

    def one_run(self, request: RunRequest) -> RunResult:
        run = Run(request, out=self.out, client=self.client, command_line=self.command_line, verbose=self.verbose)
        result = run.run()
        self.client = run.client
        print(format_summary(result), file=self.out, flush=True)
        if result.interrupted:
            raise SignalInterrupt(result.signal_number)
        return result

    def copies(self, base: Path) -> tuple[Path, Path]:
        """Two copies of the work directory as it is now (the runs' own records left out)."""
        workdir = Path(self.request.workdir).resolve()
        skip = {str(base.parent), str(base)}  # resolved: the runs directory, or this check's own in it

        def ignore(directory: str, names: list[str]) -> list[str]:
            return [n for n in names if os.path.join(directory, n) in skip]

        base.mkdir(parents=True)
        copies = (base / "undisturbed", base / "with-faults")
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


def last_step(result: RunResult) -> Optional[int]:
    """The highest training step the run's workers reported (None: none)."""
    steps = [r.step for r in ProgressReader(result.run_dir / PROGRESS_SUBDIR).poll() if r.step is not None]
    return max(steps, default=None)
