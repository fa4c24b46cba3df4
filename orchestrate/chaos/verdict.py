"""The chaos verdict (pure), per trial and over all trials.

A trial **does not hold** when the disturbed job did not complete, a scheduled fault did not
fire, a compared file or per-step metric differs, more steps were redone than
``--max-steps-redone``, it ended short of the undisturbed run's last step having done fewer
steps, in all or less those redone, an attempt after a fault restarted from the beginning though
the job had saved by ``torch.save`` and no rank loaded a file it had written after the fault (its
resume never ran), or loaded one and still started over, or no run with faults was made (nothing
was tested). It is **inconclusive** when it could not have failed for a broken resume: no fault
ended an attempt (a pause the job waited out), none that did struck after the job had written a
file in its work directory (so there was nothing to resume from), or no attempt resumed although
the job had saved and the records cannot tell why (a save not by ``torch.save``, a load from a
stream), or, where nothing was compared, it ended elsewhere than the undisturbed run by its
attempts' numbering (short though it did every step beside those redone, or past it: a skip or
a step done twice, or a misnumbered resume: not known which). Otherwise it **holds**. A check holds only when every trial holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from orchestrate.chaos.attempts import DCP_LOAD, Strike, describe_loads, lasts, redone_by
from orchestrate.chaos.schedule import Reference
from orchestrate.chaos.step_metrics import StepsComparison
from orchestrate.outcome.model import FaultRecord, Recovery, RunResult
from orchestrate.outcome.summary import ending_hint
from orchestrate.text import counted, format_table, listed, times

HOLDS = "HOLDS"
DOES_NOT_HOLD = "DOES NOT HOLD"
INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class FileComparison:
    """One ``--compare`` file of the two runs: ``kind`` is ``tensors`` (compared with torch.load,
    ``max_difference`` its largest absolute difference, ``where`` the key it is at) or
    ``bytes``; ``problem`` says what could not be compared (a missing file)."""

    path: str
    kind: str
    equal: bool
    max_difference: Optional[float] = None
    where: str = ""
    problem: str = ""
    rtol: float = 0.0  # the tolerance tensors were compared within (--rtol; 0: exactly)
    rtol_needed: Optional[float] = None  # the least --rtol that accepts every value (None: not known, or none does)

    def describe(self) -> str:
        if self.problem:
            return f"{self.path}: {self.problem}"
        if self.kind == "bytes":
            return f"{self.path}: {'identical' if self.equal else 'differs'} (bytes)"
        if self.equal and self.max_difference == 0:
            return f"{self.path}: matches (tensors; every value equal)"
        if self.max_difference is None:  # no number tells them apart: shapes, keys or values of other kinds
            return f"{self.path}: {'matches' if self.equal else 'differs'} (tensors; at {self.where or '?'})"
        at = f" at {self.where}" if self.where else ""
        within = f", within --rtol {self.rtol:g}" if self.rtol and self.equal else ""  # said: it is not equal
        return (f"{self.path}: {'matches' if self.equal else 'differs'} (tensors; largest difference"
                f" {self.max_difference:.3g}{at}{within}{self.float_noise})")

    @property
    def float_noise(self) -> str:
        """What a difference compared exactly says where it is as small as float rounding (at most
        :data:`FLOAT_NOISE` of any value): how small, and the ``--rtol`` that accepts it ("" else)."""
        needed = self.rtol_needed
        if self.equal or self.rtol or needed is None or not 0 < needed <= FLOAT_NOISE:
            return ""
        return (f"; at most {needed:.2g} of any value, the size of float rounding: --rtol"
                f" {10 ** math.ceil(math.log10(needed)):g} accepts such noise")


# The relative difference float rounding leaves (float32's epsilon is 1.2e-07, grown over a few steps): a
# difference no larger is said to be that, with the --rtol that accepts it.
FLOAT_NOISE = 1e-5


# How many of a verdict's reasons its repr shows (what a failed ``assert verdict.holds`` shows).
REASONS_SHOWN = 2

# What a trial whose compared files differ says where --compare-steps was not given: it would say where they began to.
COMPARE_STEPS_HINT = ("--compare-steps (ddp_cluster.chaos: compare_steps=True) compares the parameters, or the"
                      " metrics the ranks report, with the undisturbed run's at every step and names the first"
                      " step they differ at: where that is the first step after a resume, what the resume restored"
                      " (the optimizer's state, the data order, the random state) is not what the undisturbed run"
                      " had there")

# What a verdict that holds cannot say where no file or step was compared.
NOTHING_COMPARED = ("where it ended was not compared with the undisturbed run (--compare FILE, --compare-steps"
                    " compare what it saved or reported)")


class Verdict:
    """What a trial's verdict and a whole check's share: a ``status``, whether it holds or does
    not, and the exit code it gives. A verdict is neither true nor false (:meth:`__bool__`)."""

    @property
    def status(self) -> str:
        raise NotImplementedError

    @property
    def holds(self) -> bool:
        return self.status == HOLDS

    @property
    def does_not_hold(self) -> bool:
        """The check caught the job (``DOES NOT HOLD``): what a test that a broken resume is caught
        asserts. ``not verdict.holds`` is true of an ``INCONCLUSIVE`` verdict too, which tested nothing."""
        return self.status == DOES_NOT_HOLD

    def __bool__(self) -> bool:
        """Refused: ``assert verdict`` held for any verdict (an object is true), and ``assert not
        verdict`` for none; a verdict has three states, each asked for by name.

        Raises:
            TypeError: Naming the properties to assert instead.
        """
        raise TypeError(f"a chaos verdict ({self.status}) is neither true nor false: assert verdict.holds, or"
                        f" verdict.does_not_hold (not 'not verdict.holds', which an INCONCLUSIVE verdict passes)")

    @property
    def exit_code(self) -> int:
        return 0 if self.holds else 1


@dataclass
class ChaosVerdict(Verdict):
    """One trial: the reference, the run with faults, its schedule, what each fault struck and
    what the job redid, the comparisons."""

    seed: int
    reference: RunResult
    disturbed: Optional[RunResult]
    schedule: list[str]
    comparisons: list[FileComparison] = field(default_factory=list)
    rtol: float = 0.0
    facts: Optional[Reference] = None
    strikes: list[Strike] = field(default_factory=list)
    steps_redone: Optional[int] = None
    steps_done: Optional[int] = None  # the steps of every attempt, in all
    ended_at_step: Optional[int] = None  # the job's step its last attempt ended at, where its records say it
    steps: Optional[StepsComparison] = None  # --compare-steps
    max_steps_redone: Optional[int] = None
    not_made: str = ""  # why no run with faults was made though the reference succeeded (no time was left)
    not_compared: tuple[str, ...] = ()  # the --compare files left uncompared: the job did not complete under the faults

    @property
    def cut_short(self) -> str:
        """Why a run of the trial was ended before its job ended by a limit not its own (a test's
        time limit), naming the run, or why the trial was not made; "" where neither. Nothing is
        concluded of such a trial, unless the job had failed or was found hung before it ended:
        that is its own (a fault that leaves the ranks hung is what the check is for)."""
        if self.not_made:
            return f"no run with faults was made: {self.not_made}"
        for which, run in (("the undisturbed run", self.reference), ("the run with faults", self.disturbed)):
            if run is not None and run.limited_by and not run.hung_or_failed:
                return f"{which} was ended before its job ended ({run.limited_by}): nothing was concluded"
        return ""

    @property
    def failures(self) -> list[str]:
        """Why the trial does not hold, one line each (none: it holds or is inconclusive)."""
        if self.cut_short:  # the job was not let finish: neither a hold nor a failure of its own
            return []
        reasons = []
        if not self.reference.succeeded and self.reference.job_succeeded:  # (it has no faults)
            reasons.append(f"in the undisturbed run, {'; and '.join(self.reference.missed)}: nothing to compare with")
        elif not self.reference.succeeded:
            reasons.append(f"the undisturbed run failed (exit code {self.reference.exit_code}): nothing to compare with")
        elif self.reference.restarts_in_place:  # it needed a second attempt with no fault: nothing undisturbed
            restarted = ", ".join(f"{node} {times(n)}" for node, n in self.reference.restarts_in_place.items())
            reasons.append(f"the undisturbed run was not: torchrun restarted its workers after a failure ({restarted}),"
                           " so the job fails without faults too (its summary says how)")
        if self.disturbed is None:  # no trial ran: the reference, or what it left to compare, says why
            return (reasons + [c.describe() for c in self.comparisons if not c.equal]
                    or ["no run with faults was made: nothing was tested"])  # never a hold by accident
        if not self.disturbed.job_succeeded:
            failure = self.disturbed.failure
            reasons.append("the job did not complete under the faults"
                           + (f": {failure.describe()}" if failure else f" (exit code {self.disturbed.exit_code})"))
            hint = " ".join(ending_hint(self.disturbed).split())  # its run's summary's advice, here too, one line
            if hint:
                reasons.append(hint)
        reasons += [f"fault {f.describe()}" for f in self.disturbed.unfired_faults]
        if self.disturbed.apart:
            reasons.append(f"in the run with faults, the ranks did not form the one job torchrun started"
                           f" ({self.disturbed.apart})")
        reasons += [f"{c.describe()}" for c in self.comparisons if not c.equal]
        if self.steps is not None and not self.steps.equal:
            reasons.append(self.steps.describe())
        skipped = self.steps_skipped
        if skipped:
            resume = self.skipping_resume
            counted = " by its optimizer's count" if resume is not None and resume.next_counted else ""
            reasons.append(f"the job ended at step {self.ended_at_step}{counted}, the undisturbed run at step"
                           f" {self.facts.last_step if self.facts else '?'}: {skipped} step(s) it did were never done"
                           f" under the faults ({self.describe_skipping_resume()})")
        reasons += [resume_never_ran(s) for s in self.strikes if s.resume_skipped]
        reasons += [loaded_yet_started_over(s) for s in self.strikes if s.loaded_and_started_over]
        if self.max_steps_redone is not None and self.steps_redone is not None \
                and self.steps_redone > self.max_steps_redone:
            reasons.append(f"{self.steps_redone} step(s) redone in all, more than --max-steps-redone"
                           f" {self.max_steps_redone}")
        return reasons

    @property
    def inconclusive(self) -> list[str]:
        """Why the trial could not have caught a broken resume, one line each."""
        if self.cut_short:
            return [self.cut_short]
        if self.disturbed is None or self.failures:
            return []
        reasons = []
        struck = [s for s in self.strikes if s.restarted]
        after_save = [s for s in struck if s.after_a_save]
        if self.numbered_short:
            reasons.append(f"the job ended at step {self.ended_at_step}, the undisturbed run at step"
                           f" {self.facts.last_step if self.facts else '?'}, by its attempts' numbering, though it did"
                           f" {self.steps_done} step(s) in all with {self.steps_redone_by_faults} redone: whether a"
                           " step was skipped is not known (a second optimizer's carried count may number a resume"
                           " short); --compare what it saved to know")
        elif self.steps_overran and not self.compared:
            reasons.append(f"the job ended at step {self.ended_at_step}, the undisturbed run at step"
                           f" {self.facts.last_step if self.facts else '?'}, by the steps its attempts reported or"
                           " counted: a resume that did a step twice ends past it (a second optimizer's carried count"
                           " may number them so too); --compare what it saved to know")
        if any(s.saved is None for s in self.strikes):
            reasons.append("the work directory was not followed (too many entries): whether a fault struck after a"
                           " save is not known")
        elif not struck and all(lasts(s.spec) for s in self.strikes):
            reasons.append("no fault ended an attempt of the job (" + ", ".join(s.spec for s in self.strikes)
                           + ": it went on through each), so the resume path was never exercised; kill, restart,"
                           " preempt, kill-rank and torn-write end one")
        elif not struck:
            reasons.append("no new attempt of the job was seen after " + ", ".join(s.spec for s in self.strikes)
                           + " (no worker reported a step after it), so whether it resumed is not known")
        elif not after_save and any(s.cut_save for s in struck):  # it wrote one, whole, then the fault cut it
            reasons.append(only_file_cut(next(s for s in struck if s.cut_save)))
        elif not after_save:
            first = self.facts.describe_first_write() if self.facts else ""
            reasons.append("no fault struck after the job had written a file in its work directory, so the resume"
                           " path was never exercised" + (f" (the undisturbed run wrote its first, {first})" if first
                                                          else "; the undisturbed run wrote none either"))
        elif not any(s.resumed for s in after_save) and any(s.resumed is False for s in after_save):
            reasons.append(never_resumed([s for s in after_save if s.resumed is False], self.steps_redone,
                                         self.steps_done, self.facts.step_count if self.facts else None))
        if self.steps is not None and self.steps.compared == 0:
            reasons.append("--compare-steps: no metric was reported at a step both runs reached (a script that"
                           " reports its own steps reports its metrics with orchestrate.progress.report(step,"
                           " loss=...); one that does not gets its parameters' digest at each optimizer step,"
                           " compared only where its attempts' steps are placed in the job's)")
        if self.max_steps_redone is not None and self.steps_redone is None:
            reasons.append("--max-steps-redone: the steps redone are not known (no steps were reported or counted)")
        return reasons

    @property
    def status(self) -> str:
        if self.failures:
            return DOES_NOT_HOLD
        return INCONCLUSIVE if self.inconclusive else HOLDS

    @property
    def headline(self) -> str:
        """The trial in one line: its seed, its status, and why (its first reasons), or the
        faults it held through."""
        status, reasons = self.status, self.failures or self.inconclusive
        if reasons:
            return f"seed {self.seed}: {status}: {first_reasons(reasons)}"
        faults = counted(len(self.schedule), "fault") + (f": {' '.join(self.schedule)}" if self.schedule else "")
        return f"seed {self.seed}: {status}, {faults}" + ("; where it ended was not compared" if self.unchecked else "")

    def __repr__(self) -> str:
        """What a failed ``assert verdict.holds`` shows: the trial's headline, not every field of its
        runs (pytest keeps a long repr's head and tail, and the dataclass's cut off the why)."""
        return within_repr("ChaosVerdict", self.headline)

    @property
    def unchecked(self) -> str:
        """What a trial that holds did not test ("" where it compared files or steps, or does not hold)."""
        if self.status != HOLDS or self.comparisons or self.steps is not None:
            return ""
        return NOTHING_COMPARED

    @property
    def ended_apart(self) -> int:
        """The job's last step with faults less the undisturbed run's, as its attempts' records
        say, where it completed (0: not known)."""
        last = self.facts.last_step if self.facts else None
        if self.disturbed is None or not self.disturbed.job_succeeded or last is None or self.ended_at_step is None:
            return 0
        return self.ended_at_step - last

    @property
    def steps_redone_by_faults(self) -> int:
        """The steps the attempts after the faults did again, as each fault's row says (where the
        struck attempt had got less where the next one started from; 0 where none is known)."""
        return redone_by(self.strikes)

    @property
    def steps_skipped(self) -> int:
        """The undisturbed run's steps the job with faults never did: where it ended short of the
        undisturbed run's last step, having completed, and did fewer steps than it, in all or
        less the steps its faults' rows say were redone (a resume that skips the step after its
        save and redoes one done after that save does as many steps in all, and ends a step
        short); 0: none, or not known (see :attr:`numbered_short`)."""
        count = self.facts.step_count if self.facts else None
        if count is None or self.steps_done is None:
            return 0
        if self.steps_done >= count and self.steps_done - self.steps_redone_by_faults >= count:
            return 0
        return max(0, -self.ended_apart)

    @property
    def numbered_short(self) -> bool:
        """The job ended short of the undisturbed run's last step by its attempts' numbering,
        though it did all of that run's steps beside those redone: a skip, or a counter that took
        a second optimizer's carried count and misnumbered a resume; not known which, so never
        a hold where nothing was compared (what it saved, compared equal, says it did them all)."""
        return (self.ended_apart < 0 and not self.steps_skipped and self.steps_done is not None
                and not self.compared)

    @property
    def compared(self) -> bool:
        """A ``--compare`` file or ``--compare-steps`` was compared: where the job ended was tested
        by what it saved or reported, not only by its attempts' numbering."""
        return bool(self.comparisons) or self.steps is not None

    @property
    def skipping_resume(self) -> Optional[Strike]:
        """The resume the steps skipped are put down to: the last (None: no fault was followed by one)."""
        resumes = [s for s in self.strikes if s.restarted and s.resumed_from]
        return resumes[-1] if resumes else None

    def describe_skipping_resume(self) -> str:
        """What the last resume did, as the records allow: where it resumed from, the steps it
        did after that, and how many the undisturbed run did after that step; where its steps were
        counted, that a script's own numbering ran ahead of the optimizer's by the steps it skipped."""
        last = self.facts.last_step if self.facts else None
        resume = self.skipping_resume
        if resume is None or last is None or self.ended_at_step is None:
            return "a resume went on past the step it restored"
        after = self.ended_at_step - resume.resumed_from
        numbering = (f"; such a loop numbers its steps {self.steps_skipped} ahead of the optimizer's count from the"
                     f" resume on, so the last it prints is step {self.ended_at_step + self.steps_skipped}"
                     if resume.next_counted else "")
        return (f"after {resume.spec} it resumed from step {resume.resumed_from} and did {after} step(s) more, where"
                f" the undisturbed run did {last - resume.resumed_from} after step {resume.resumed_from}: a resume"
                f" went on past the step it restored, as a loop from the saved step + 2 does{numbering}")

    @property
    def steps_overran(self) -> int:
        """How many steps past the undisturbed run's last the job with faults ended, by its
        attempts' records (0: not past it, or not known); not judged a failure, as a second
        optimizer's carried count may misnumber a resume that did every step once, but never a
        hold where nothing was compared (inconclusive)."""
        return max(0, self.ended_apart)

    @property
    def recovered(self) -> list[Recovery]:
        """The run with faults' recoveries the job recovered from: each that a step came after,
        or, of a job that reports no steps, every one where it completed. A node that rejoined
        after which the job failed before a step (its workers failed reading a torn save) is no
        recovery."""
        if self.disturbed is None:
            return []
        return [r for r in self.disturbed.recoveries if r.resumed_at is not None or self.disturbed.job_succeeded]

    @property
    def time_lost_s(self) -> Optional[float]:
        if self.disturbed is None:
            return None
        return self.disturbed.timings.job_s - self.reference.timings.job_s

    def fault_rows(self) -> list[tuple[str, ...]]:
        """One row per scheduled fault: when it fired, what it struck, whether the job had saved,
        what the next attempt did (or why it did not fire)."""
        records: dict[str, FaultRecord] = {f.spec: f for f in (self.disturbed.faults if self.disturbed else [])}
        strikes = {s.spec: s for s in self.strikes}
        rows = []
        for spec in self.schedule:
            record, strike = records.get(spec), strikes.get(spec)
            if record is None or not record.fired:  # its whole reason is the verdict's (failures)
                why = gist(record.reason) if record else "the run did not get there"
                rows.append((spec, f"did not fire: {why}", "-", "-", "-"))
                continue
            at = f"{record.elapsed_s or 0.0:.1f} s" + ("" if record.step is None else f", step {record.step}")
            if record.struck_s is not None:  # armed then, struck at a write later
                step = f", step {strike.struck_step}" if strike is not None and strike.struck_step is not None else ""
                at += f"; struck at {record.struck_s:.1f} s{step}"
            if strike is None:
                rows.append((spec, at, "-", "-", "-"))
            else:
                skipped = self.steps_skipped if strike is self.skipping_resume else 0
                rows.append((spec, at, strike.describe_struck(), strike.describe_saved(),
                             strike.describe_next(skipped)))
        return rows

    def format(self) -> str:
        """The table and the verdict, as ``chaos`` prints them."""
        lines = ["", f"=== chaos check (seed {self.seed}) ==="]
        rows = self.fault_rows()
        if rows:  # none where no trial ran
            lines += format_table(("fault", "fired at", "the attempt it struck had done", "saved before it",
                                   "the next attempt"), rows)
        if self.disturbed is not None:
            recovered = self.recovered
            for recovery in self.disturbed.recoveries:
                lines.append(f"recovery: {recovery.describe()}" if recovery in recovered else
                             f"no recovery: {recovery.describe(job_succeeded=False)}")
            reference_steps = self.facts.step_count if self.facts else None
            done = self.steps_done if self.steps_done is not None else self.steps_redone + (reference_steps or 0) \
                if self.steps_redone is not None else None
            redone = ("-" if self.steps_redone is None else
                      f"{self.steps_redone} ({done} done against {reference_steps} undisturbed)")
            # a node the launcher restarted is a recovery; workers torchrun restarted in place, a restart
            restarts = sum(self.disturbed.restarts_in_place.values())
            rejoined = len(self.disturbed.recoveries) - len(recovered)
            lines.append(f"recoveries {len(recovered)}"
                         + (f" ({rejoined} rejoin(s) with no step after: the job failed)" if rejoined else "")
                         + (f" | restarts in place {restarts}" if restarts else "") + f" | steps redone {redone}"
                         f" | {time_lost(self.disturbed.timings.job_s, self.reference.timings.job_s)}")
        for comparison in self.comparisons:
            lines.append(f"compared {comparison.describe()}")
        if self.steps is None and any(not c.equal and not c.problem for c in self.comparisons):
            lines.append(f"hint: {COMPARE_STEPS_HINT}")  # once, however many files differ
        if self.not_compared:
            lines.append(f"not compared: {listed(list(self.not_compared), 3)}: the job did not complete under the"
                         " faults, so it did not end where the undisturbed run ended (what it left is not compared)")
        if self.steps is not None:
            lines.append(f"compared {self.steps.describe()}")
        lines.append(f"runs: undisturbed {self.reference.run_dir}"
                     + (f", with faults {self.disturbed.run_dir}" if self.disturbed else ""))
        if self.facts is not None and self.facts.held_before:
            lines.append(f"note: {held_before_note(self.facts.held_before)}")
        status = self.status
        if status == HOLDS and not self.unchecked:
            lines.append(f"VERDICT HOLDS: the job survived {len(self.schedule)} fault(s), resumed after a save, and"
                         " ended where the undisturbed run ended")
        elif status == HOLDS:  # said as far as it was tested: nothing was compared
            lines.append(f"VERDICT HOLDS: the job survived {len(self.schedule)} fault(s) and resumed after a save;"
                         f" {NOTHING_COMPARED}")
        elif status == DOES_NOT_HOLD:
            lines.append("VERDICT DOES NOT HOLD:")
            lines += [f"  {reason}" for reason in self.failures]
        elif self.inconclusive[0].startswith(NEVER_RESUMED):  # it caught that: the job starts over
            first, *others = self.inconclusive
            lines.append(f"VERDICT INCONCLUSIVE: {NEVER_RESUMED}:")
            lines += [f"  {first[len(NEVER_RESUMED) + 2:]}"] + [f"  {reason}" for reason in others]
        else:
            lines.append("VERDICT INCONCLUSIVE: the check could not have caught a broken resume:")
            lines += [f"  {reason}" for reason in self.inconclusive]
        return "\n".join(lines)

    def record(self) -> dict:
        """``chaos.json``: what the report page shows."""
        return {"seed": self.seed, "status": self.status, "holds": self.holds, "failures": self.failures,
                "inconclusive": self.inconclusive, "rtol": self.rtol,
                "schedule": [dict(zip(("fault", "fired_at", "struck", "saved_before", "next_attempt"), row))
                             for row in self.fault_rows()],
                "comparisons": [{"path": c.path, "kind": c.kind, "equal": c.equal, "max_difference": c.max_difference,
                                 "where": c.where, "problem": c.problem} for c in self.comparisons],
                "not_compared": list(self.not_compared),
                "steps_compared": self.steps.describe() if self.steps else None, "unchecked": self.unchecked,
                "held_before": list(self.facts.held_before) if self.facts else [],
                "steps_redone": self.steps_redone, "steps_done": self.steps_done,
                "ended_at_step": self.ended_at_step, "steps_skipped": self.steps_skipped,
                "time_lost_s": self.time_lost_s,
                "reference_run": self.reference.run_id,
                "disturbed_run": self.disturbed.run_id if self.disturbed else None}


# How a save survives a cut (a torn write): the advice a verdict gives, with the file's name.
SAVE_WHOLE = ("write each save to a temporary file beside it, then os.replace() it onto {0} (a rename is atomic), so"
              " that a cut leaves the last whole one")


def only_file_cut(strike: Strike) -> str:
    """Why a trial whose torn write cut the only file the job had written whole is inconclusive
    (pure): the resume path had nothing left to resume from. Whether that file is the job's save
    (every saved step lost, as a crash in a save would lose them) or another it rewrites (a
    metrics file: it had saved nothing yet) only the job knows; either way the check did not hold."""
    if strike.resumed is False:
        then = ("the next attempt restarted from the beginning"
                + ("" if strike.redone is None else f" ({strike.redone} step(s) redone)"))
    else:
        then = "where the next attempt started is not known"
    return (f"{strike.spec} cut {strike.cut_save}, the only file the job had written before it, and {then}, so the"
            f" resume path was never exercised; if {strike.cut_save} is its save, a crash in the middle of a save loses"
            " every step saved: " + SAVE_WHOLE.format(strike.cut_save))


# What an inconclusive verdict says first where its job never resumed from what it saved.
NEVER_RESUMED = "the job never resumed from what it saved"


def never_resumed(started_over: list[Strike], redone: Optional[int], done: Optional[int],
                  reference_steps: Optional[int]) -> str:
    """Why a trial whose job restarted from the beginning after every fault that struck after a
    save is inconclusive (pure): the faults it restarted after, the save, the steps redone, and what
    the ranks loaded after them. Where the save was by ``torch.save`` and nothing the job had
    written was loaded, or its save was loaded, the trial does not hold (:func:`resume_never_ran`,
    :func:`loaded_yet_started_over`); here the records cannot tell: a file not written by
    ``torch.save`` (a log, or a save read some other way), a load from a stream, or loads not
    followed. Whether it is the save the job means to resume from only the job knows;
    ``--max-steps-redone`` says which."""
    save = next((s.named_save for s in started_over if s.named_save), "files")
    known = [s.redone for s in started_over]
    if redone is None and None not in known:
        redone = sum(known)
    against = (f" ({done} done against {reference_steps} undisturbed)" if done is not None and reference_steps
               else "")
    cost = f": {redone} step(s) redone in all{against}" if redone is not None else ""
    each = "each of " if len(started_over) > 1 else ""
    return (f"{NEVER_RESUMED}: after {each}{listed([s.spec for s in started_over], 4)} it restarted from the beginning"
            f" although it had written {save}{cost}; {loads_seen(started_over, save)}: if"
            f" it is the save the job should resume from, its resume never ran (a load skipped, or a path that"
            f" differs); --max-steps-redone N (the steps a resume from it may redo: those between two saves) makes"
            f" a run that starts over not hold")


def loads_seen(started_over: list[Strike], save: str) -> str:
    """What the records show of ``save`` and the loads after the faults a job started over after,
    where that cannot tell a skipped resume (pure)."""
    if any(s.loaded is None for s in started_over):
        return f"the records show {save} written, not whether it was read"
    loads = [load for s in started_over for load in s.loaded or ()]
    streams = [load for load in loads if load.path == ""]
    if streams:
        ranks = listed([str(rank) for rank in sorted({load.rank for load in streams})], 3)
        return f"rank(s) {ranks} loaded a stream with torch.load after it, whose file is not known"
    others = f"; it loaded only {describe_loads(loads)} with {' and '.join(dict.fromkeys(l.by for l in loads))}" \
        if loads else ""
    return (f"{save} was not written by torch.save or dcp.save, and no rank loaded it with torch.load or dcp.load after"
            f" it{others}, so whether the job reads it back some other way is not known")


def resume_never_ran(strike: Strike) -> str:
    """Why a trial whose job started over after ``strike`` though it had saved by ``torch.save``
    (or ``dcp.save``), and loaded no file it had written, does not hold (pure): such a save is a
    checkpoint by its kind, read back by ``torch.load`` (``dcp.load``), and the workers say every
    one of those; none read it."""
    redone = "" if strike.redone is None else f" ({strike.redone} step(s) redone)"
    others = f"; it loaded only {describe_loads(list(strike.loaded or ()))}" if strike.loaded else ""
    return (f"its resume never ran: after {strike.spec} the job restarted from the beginning{redone} although it had"
            f" written {strike.torch_save} with {strike.saved_by}, and no rank loaded {strike.torch_save}, or any file"
            f" it had written, with {strike.loader} after the fault{others} (a resume that looks for another path, a"
            " flag it was not given, or a check for a file it never writes)")


def loaded_yet_started_over(strike: Strike) -> str:
    """Why a trial whose job loaded what it had saved after ``strike`` and still started over does
    not hold (pure): it read its save back and did not take up its step, or it read a stale file."""
    redone = "" if strike.redone is None else f" ({strike.redone} step(s) redone)"
    what = "a checkpoint" if all(load.by == DCP_LOAD for load in strike.loaded_saves) else "a file"
    return (f"after {strike.spec} the job loaded {describe_loads(strike.loaded_saves)}, {what} it had written before"
            f" the fault, and still restarted from the beginning{redone}: it loaded its save but did not take up the"
            f" step it was saved at (its step counter, its data position), or the {what[2:]} it loaded is a stale one,"
            " not its latest save")


def held_before_note(paths: tuple[str, ...]) -> str:
    """What a check whose work directory held the job's saves before it tested (pure)."""
    files, them = listed(list(paths), 3), "them" if len(paths) > 1 else "it"
    return (f"the work directory held {files} before the check, and the undisturbed run wrote {them} again: a job"
            f" that resumes from its saves began every run from there, not from its start (move {them} out of the"
            " work directory to check the job from its start)")


@dataclass
class ChaosResult(Verdict):
    """A whole check: one undisturbed run and one verdict per trial."""

    reference: RunResult
    trials: list[ChaosVerdict]
    trials_asked: int = 1  # more than were made where the check stopped early (a test's own time limit)

    @property
    def status(self) -> str:
        statuses = [t.status for t in self.trials] or [DOES_NOT_HOLD]
        if DOES_NOT_HOLD in statuses:
            return DOES_NOT_HOLD
        return INCONCLUSIVE if INCONCLUSIVE in statuses else HOLDS

    @property
    def failures(self) -> list[str]:
        """Every trial's reasons for not holding, or for being inconclusive, each naming its seed."""
        many = len(self.trials) > 1
        return [f"seed {t.seed}: {r}" if many else r for t in self.trials for r in (t.failures or t.inconclusive)]

    def __repr__(self) -> str:
        """What a failed ``assert result.holds`` shows: its status, its seeds, and why first (the
        first reasons, each naming its trial's seed where there were several), as a trial's."""
        if len(self.trials) == 1 and self.trials_asked <= 1:
            return within_repr("ChaosResult", self.trials[0].headline)
        made = (f"{len(self.trials)} of {counted(self.trials_asked, 'trial')}" if self.trials_asked > len(self.trials)
                else counted(len(self.trials), "trial"))
        seeds = ", ".join(str(t.seed) for t in self.trials)
        if seeds:
            made += f", {'seeds' if len(self.trials) > 1 else 'seed'} {seeds}"
        reasons = self.failures or ([] if self.trials else ["no trial was made: nothing was tested"])
        return within_repr("ChaosResult", f"{made}: {self.status}" + (f": {first_reasons(reasons)}" if reasons else ""))

    def rows(self) -> list[tuple[str, ...]]:
        return [(str(t.seed), " ".join(t.schedule) or "-",
                 str(len(t.recovered)) if t.disturbed else "-",
                 "-" if t.steps_redone is None else str(t.steps_redone), t.status) for t in self.trials]

    def format(self) -> str:
        """What ``chaos`` prints at the end: the one trial's verdict (or why none was made), or
        every trial's line and the check's verdict (each trial's own was printed as it ended)."""
        if len(self.trials) == 1 and (self.trials_asked <= 1 or self.trials[0].disturbed is None):
            return self.trials[0].format()
        made = (f"{len(self.trials)} of {self.trials_asked} trials" if self.trials_asked > len(self.trials)
                else f"{len(self.trials)} trials")
        lines = ["", f"=== chaos check: {made} against one undisturbed run ({self.reference.run_dir}) ==="]
        lines += format_table(("seed", "schedule", "recoveries", "steps redone", "verdict"), self.rows())
        status = self.status
        if status == HOLDS:
            lines.append(f"VERDICT HOLDS: every one of {len(self.trials)} trials held")
        else:
            counted = sum(1 for t in self.trials if t.status == status)
            lines.append(f"VERDICT {status}: {counted} of {len(self.trials)} trials {status.lower()}:")
            lines += [f"  {reason}" for reason in self.failures]
        return "\n".join(lines)


def time_lost(job_s: float, undisturbed_s: float) -> str:
    """The summary line's time lost (pure): the job's time with faults less the undisturbed
    run's, or none where the run with faults took less (its run's time varied by more than the
    faults cost: a machine's load, a rendezvous that took longer the first time)."""
    lost = job_s - undisturbed_s
    against = f"job {job_s:.1f} s against {undisturbed_s:.1f} s undisturbed"
    if round(lost, 1) >= 0:
        return f"time lost {max(lost, 0.0):+.1f} s ({against})"
    return (f"time lost none ({-lost:.1f} s faster: {against}; a run's time varies with the machine's load by more"
            " than these faults cost)")


def first_reasons(reasons: list[str]) -> str:
    """The first :data:`REASONS_SHOWN` of a verdict's reasons, and how many more (pure)."""
    more = len(reasons) - REASONS_SHOWN
    return "; ".join(reasons[:REASONS_SHOWN]) + (f" (+{more} more)" if more > 0 else "")


# The longest repr pytest shows whole in a failed assert's "where" line (its saferepr's
# DEFAULT_REPR_MAX_SIZE): a longer one it cuts in the middle of a word ("per-step metric...he resume").
REPR_LIMIT = 240
# What a repr cut to fit says in place of the rest.
CUT = " [...: .format() says all]"
# Where a reason may be cut: after a clause, never inside a word or a number.
CLAUSE_ENDS = ("; ", ": ", ", ", " (")


def within_repr(name: str, text: str, limit: int = REPR_LIMIT) -> str:
    """``name(text)`` in at most ``limit`` characters (pure): whole where it fits, else cut at
    the end of the last clause that fits, saying so, so that pytest shows it whole."""
    whole = f"{name}({text})"
    if len(whole) <= limit:
        return whole
    room = limit - len(name) - 2 - len(CUT)
    cut = max(text.rfind(end, 0, room) for end in CLAUSE_ENDS)
    if cut <= 0:  # no clause ends that early: after a word, or where none ends, at the room's end
        space = text.rfind(" ", 0, room)
        cut = space if space > 0 else max(room, 0)
    return f"{name}({text[:cut].rstrip(';:, ')}{CUT})"


def gist(reason: str) -> str:
    """A reason without what it adds in parentheses (pure): a table's cell, where the verdict
    below says the whole (what a storage fault reaches runs to 150 characters)."""
    return reason.split(" (", 1)[0]
