"""The hang watchdog's policy: when the job has made no progress for a while, probe every rank
twice, some seconds apart, and judge.

Progress is any worker line but torch's own log lines (:func:`is_progress_line`), any progress
report (the supervisor calls :meth:`HangWatch.progress` for both), a collective that completed
between the probes, or a rank that computed between them (CPU time). So a rank busy in one long step, or rank 0 evaluating alone while the others
wait in a barrier, is not hung: the diagnosis then says what the ranks are doing. No look can
tell a long step from a loop that never ends, so a job that stays quiet and working is said
again, in one line with where every rank is, at 4 times the threshold of quiet, then 8, 16... (where
ranks slow to answer put the first look off, from twice the quiet time it came at).

A rank that does not answer, and that the engine does not explain (stopped, its node paused),
makes a judgement unknown: nothing is said or ended on it, and the watchdog looks again.
When nothing moved, the diagnosis is said once, after ``diagnose_after_s``; with
``end_after_s`` (``--hang-timeout``) the run is ended as failed once that much time has passed
without progress, with the diagnosis as its root cause.
"""
from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

from orchestrate.hangs.diagnosis import COMPLETING, MOVING_DATA, HangDiagnosis, diagnose
from orchestrate.hangs.snapshots import Probe

# Seconds between the two looks of one judgement.
RECHECK_S = 5.0
# Seconds a look waits for the workers' answers (they look for requests every 0.25 s).
ANSWER_WINDOW_S = 1.5
# What ends a run from outside, before which the ranks are looked at (see HangWatch.look_at_the_end).
AT_THE_TIME_LIMIT, AT_THE_INTERRUPT = "at the time limit", "at the interrupt"
# The default quiet time before a diagnosis is printed (--hang-diagnose-after).
DIAGNOSE_AFTER_S = 120.0
# A job that works without a line is said again when its quiet time reaches this many times the
# threshold, then twice that each time.
BUSY_REMINDER_FACTOR = 4.0
# torch's own log lines, C++ and Python alike, in glog's form: a level letter and the date, the
# time, then the thread and the source (``[W1125 04:47:18.251384384 socket.cpp:767] [c10d] ...``,
# ``[rank0]:W1125 04:44:57.430000 25084 torch/_logging/_internal.py:1199] ...``).
_TORCH_LOG_LINE = re.compile(r"^(\[rank\d+\]:)?\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ ")
# The C++ backtrace torch prints under some of its log lines (a store's failed connect, each retry):
# its head, then a line per frame.
CPP_BACKTRACE = re.compile(r"^Exception raised from .+ at .+ \(most recent call first\):$")
CPP_FRAME = re.compile(r"^frame #\d+: ")


def is_progress_line(text: str) -> bool:
    """Whether a worker's line shows that the job moves: any line but torch's own log lines and
    the C++ backtraces under them. A store whose connection fails says so, backtrace and all,
    every few seconds while nothing moves (a script's ``init_method`` naming an address where no
    store listens, a store host cut off or lost); a rank that works beside such lines still
    counts, by its CPU time or its collectives."""
    return not (_TORCH_LOG_LINE.match(text) or CPP_BACKTRACE.match(text.strip()) or CPP_FRAME.match(text))


# The lines torch's exception hook prints as a rank dies of an exception it did not catch: its
# traceback, each line after the rank (``[rank0]: Traceback (most recent call last):``), as when a
# --collective-timeout ends a hung rank's wait. (torch's own log lines have no space after it.)
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ")
_TRACEBACK_START = re.compile(r"^\[rank\d+\]: Traceback \(most recent call last\):")


class DyingRanks:
    """Which ranks print the traceback they die of: progress, as any line, but no sign that a job
    said to look hung moved again (a collective timeout's traceback must not take a hang back as
    'a long wait' before the run fails HUNG). A rank is dying from its
    ``[rankN]: Traceback (most recent call last):`` on, while its lines keep torch's prefix: a
    script's own lines in that style (``[rank0]: epoch 3 loss 0.52``) are the job moving."""

    def __init__(self) -> None:
        self.dying: set[int] = set()

    def dying_line(self, rank: int, text: str) -> bool:
        """Whether ``text``, the next line of ``rank``'s, is of the traceback it dies of (feed
        every progress line of each rank, in order)."""
        if not _RANK_PREFIX.match(text):
            self.dying.discard(rank)
            return False
        if _TRACEBACK_START.match(text):
            self.dying.add(rank)
        return rank in self.dying


def say_hung(found: HangDiagnosis, say: Callable[[str], None], record: Callable[..., None]) -> None:
    """Say the verdict that ends a hung run, its headline then where every rank waits, and keep it
    in the run's events (``hung``): the Compose supervisor's and the Slurm backend's alike."""
    say(f"HUNG: {found.headline}")
    for line in found.lines()[1:]:
        say(line)
    found.said = True  # (the summary, on the same output, says its long hints in short)
    record("hung", headline=found.headline, divergence=found.divergence.text if found.divergence else None)


def not_ended_note(end_after_s: float, found: HangDiagnosis, collective_timeout_s: Optional[float] = None) -> str:
    """Why --hang-timeout passed without ending a job that works quietly, and, where ranks wait in
    a collective for the ones that work, what bounds that wait: the run's own --collective-timeout,
    else that option."""
    note = f"--hang-timeout {end_after_s:g} has not ended the run: {what_makes_progress(found)}"
    if not any(a.state == "collective" for a in found.activities):
        return note
    if collective_timeout_s is not None:
        return note + (f"; this run's --collective-timeout {collective_timeout_s:g} ends the waits in a collective"
                       " (where the script gives its process groups no timeout of its own)")
    return note + "; --collective-timeout S ends a wait in a collective after S seconds, saying where every rank was"


def what_makes_progress(found: HangDiagnosis) -> str:
    """Why the ranks that work are progress, by what they do: compute (a DataLoader's workers'
    computing too), move a collective's data, or both; or that collectives complete."""
    working = [a for a in found.activities if a.state == "busy"]
    moving = any(a.detail.startswith(MOVING_DATA) for a in working)
    computing = any(not a.detail.startswith(MOVING_DATA) for a in working)
    if computing and moving:
        return ("a rank that computes makes progress, and so does one whose collective moves data; no look tells a"
                " long step from an endless loop")
    if moving:  # a transfer ends once its data moved
        return "a rank whose collective moves data makes progress"
    if computing:
        return "a rank that computes makes progress, and no look tells a long step from an endless loop"
    if found.progress and found.progress != COMPLETING:  # (a rank that restarted)
        return f"progress between the looks: {found.progress}"
    return "collectives that complete are progress"


# What a look at an interrupt says where no worker of the job's current attempt had begun: an elastic
# job whose rendezvous never formed (a node paused or cut off before it joined) has no rank to look
# at, and none to be busy. (The ranks known are the current attempt's: a restart forgets the earlier's,
# whose workers may well have started and trained.)
NO_WORKER_YET = ("no worker of the current attempt had started, so there was no rank to look at (an elastic job's"
                 " ranks are known once its rendezvous forms): no verdict")


class HangWatch:
    """Watches one run's progress (see the module's text). It never blocks: a look sends the
    request, and takes the answers one answer window later.

    Args:
        diagnose_after_s: Quiet seconds before the diagnosis is said (0: never, unless
            ``end_after_s``).
        end_after_s: Quiet seconds after which a hung run is ended (None: never).
        ask: Sends every rank a request for its snapshot; returns the request's id.
        answers: The answers to a request so far, as a probe taken at a time.
        expected: The ranks that should answer now.
        absent_why: Why ranks that did not answer cannot (stopped, their node paused).
        say: Prints one line.
        clock: Monotonic seconds.
        run_id: The run, named in the diagnosis where a rank waits in its debugger.
        cut_by: The faults in effect now that cut the nodes' network (a partition, a disconnect),
            named where ranks wait across it.
        collective_timeout_s: The run's ``--collective-timeout`` (None: not set), named where
            ``--hang-timeout`` passes while ranks wait in a collective for a computing one.
    """

    def __init__(self, diagnose_after_s: float, end_after_s: Optional[float], ask: Callable[[], str],
                 answers: Callable[[str, float], Probe], expected: Callable[[], set[int]],
                 absent_why: Callable[[set[int]], dict[int, str]], say: Callable[[str], None],
                 clock: Callable[[], float], recheck_s: Optional[float] = None,
                 answer_window_s: Optional[float] = None, run_id: str = "",
                 cut_by: Callable[[], Sequence[str]] = tuple, collective_timeout_s: Optional[float] = None) -> None:
        thresholds = [t for t in (diagnose_after_s, end_after_s) if t]
        self.threshold = min(thresholds) if thresholds else None
        self.end_after_s = end_after_s
        self.ask = ask
        self.answers = answers
        self.expected = expected
        self.absent_why = absent_why
        self.say = say
        self.clock = clock
        self.run_id = run_id
        self.cut_by = cut_by
        self.collective_timeout_s = collective_timeout_s
        self.recheck_s = RECHECK_S if recheck_s is None else recheck_s
        self.answer_window_s = ANSWER_WINDOW_S if answer_window_s is None else answer_window_s
        self.last_progress: Optional[float] = None  # the latest progress, or look that found the job working
        self.quiet_since: Optional[float] = None  # the latest progress: a worker line or report
        self.busy_reminder_at = 0.0  # the quiet seconds at which a working job is said again
        self.asked: list[tuple[str, float]] = []  # this judgement's requests: at most two
        self.first: Optional[Probe] = None
        self.said_hung = self.said_busy = False
        self.said_not_ended = False  # said that --hang-timeout passed with the job working, since it last moved
        self.diagnosis: Optional[HangDiagnosis] = None  # the latest hung one
        self.working: Optional[HangDiagnosis] = None  # the latest look that found the job quiet but working
        self.moved_at: Optional[float] = None  # the latest progress of the job's own (not a hold)
        self.said_held = False  # said that a fault holds the job past the threshold, since it last moved

    def progress(self, now: float, moved: bool = True, held_by: str = "") -> None:
        """The job moved (a worker line, a progress report), or is held as asked (``moved``
        False: a fault with an end, a terminal debugging a rank, the lines of its own ending):
        the quiet time starts again. Where the job was said to look hung and then moved, that is
        taken back: it was a long wait, not a hang. A job that ``held_by`` (faults with an end)
        keeps quiet past the threshold is said once, since a hang is not judged meanwhile."""
        if moved:
            self.moved_at, self.said_held = now, False
        elif (held_by and not self.said_held and self.threshold is not None and self.moved_at is not None
              and now - self.moved_at >= self.threshold):
            self.said_held = True
            self.say(f"no progress for {now - self.moved_at:.0f} s while {held_by} holds the job as asked: no hang is"
                     " judged until it ends")
        if moved and self.said_hung and self.quiet_since is not None:
            self.say(f"the job moved again after {now - self.quiet_since:.0f} s without progress: what looked hung"
                     " was a long wait (a rank that waits on the network or a disk uses no CPU, so no look can"
                     " tell it from a hang)")
        self.last_progress = self.quiet_since = now
        self.asked, self.first = [], None
        self.diagnosis = self.working = None
        self.said_hung = self.said_busy = self.said_not_ended = False

    def poll(self, now: float) -> Optional[HangDiagnosis]:
        """Look and judge when due; return the diagnosis when the run must end as hung."""
        if self.threshold is None or self.last_progress is None:
            return None
        if self.said_hung and self.end_after_s is None:
            return None  # said once; nothing more until progress
        due = self.end_after_s if self.said_hung and self.end_after_s is not None else self.threshold
        quiet = now - self.last_progress
        if quiet < max(0.0, due - self.recheck_s - self.answer_window_s):  # the first look comes early
            return None
        if not self.asked:
            self.asked.append((self.ask(), now))
            return None
        request, at = self.asked[-1]
        if now - at < self.answer_window_s:
            return None
        if len(self.asked) == 1:
            if self.first is None:
                self.first = self.answers(request, at)
            if now - at >= self.recheck_s:
                self.asked.append((self.ask(), now))
            return None
        if quiet < due:
            return None
        first, second = self.first, self.answers(request, at)
        self.asked, self.first = [], None
        return self.judge(first, second, quiet, now)

    @property
    def last_verdict(self) -> Optional[HangDiagnosis]:
        """What the latest look found of the quiet time it judged: hung, else quiet and working."""
        return self.diagnosis or self.working

    def due_at_the_end(self) -> bool:
        """Whether the run, about to be ended from outside (its time limit, an interrupt), has a quiet time the
        watchdog has not judged (a limit shorter than --hang-diagnose-after): not when a line came
        a moment ago (the job moves, and was too slow for its limit)."""
        if self.threshold is None or self.diagnosis is not None or self.working is not None:
            return False
        return self.quiet_since is not None and self.clock() - self.quiet_since >= self.recheck_s

    def look_at_the_end(self, go_on_until: Callable[[float], None], occasion: str = AT_THE_TIME_LIMIT
                        ) -> Optional[HangDiagnosis]:
        """Two looks at every rank, an answer window apart, as the run is about to be ended from
        outside (see :meth:`due_at_the_end`; ``occasion``: by what), and where each rank is said,
        so that the summary tells a hang from a slow job; at an interrupt, the look is said first
        (a person waits on it). ``go_on_until(t)`` follows the run (its lines, its records) until
        clock time ``t``. None when the job moved during the looks, or a rank's silence leaves it
        unknown."""
        quiet_since = self.quiet_since
        if occasion == AT_THE_INTERRUPT:
            self.say(f"no progress for {self.quiet_for(self.clock()):.0f} s: looking where every rank waits before"
                     f" they stop ({2 * self.answer_window_s:g} s)")
        probes = []
        for _ in range(2):
            request, at = self.ask(), self.clock()
            go_on_until(at + self.answer_window_s)  # the lines go on meanwhile
            probes.append(self.answers(request, at))
        if self.quiet_since != quiet_since:
            if occasion == AT_THE_INTERRUPT:
                self.say("the job printed during the look: it moves, so no verdict")
            return None  # a worker's line during the looks: it moves
        found = self.judge_at_the_end(probes[0], probes[1], self.clock())
        if found is None and occasion == AT_THE_INTERRUPT:
            if not self.expected() and not probes[1].snapshots:  # (no rank to have been busy)
                self.say(NO_WORKER_YET)
            else:
                self.say("not every rank answered the look (one may be busy): no verdict")
        if found is not None:
            self.say(f"{occasion}, {'hung' if found.hung else 'working'}: {found.headline}")
            for line in found.lines()[1:]:
                self.say(line)
        return found

    def judge_at_the_end(self, first: Probe, second: Probe, now: float) -> Optional[HangDiagnosis]:
        """Judge two looks taken as the run is ended from outside (its time limit) before the
        watchdog judged its quiet time: kept as :attr:`diagnosis` (hung) or :attr:`working`.
        None when a rank's silence leaves it unknown."""
        found = self.verdict(first, second, self.quiet_for(now))
        if found is None:
            return None
        if found.hung:
            self.diagnosis = found
        else:
            self.working = found
        return found

    def quiet_for(self, now: float) -> float:
        """Seconds since the latest progress (a look that found the job working is none)."""
        return now - self.quiet_since if self.quiet_since is not None else 0.0

    def verdict(self, first: Optional[Probe], second: Probe, quiet: float) -> Optional[HangDiagnosis]:
        """The diagnosis of two looks; None when it is unknown: a rank that did not answer and is
        not stopped may be busy (look again later)."""
        expected = self.expected()
        absent = self.absent_why(expected - set(second.snapshots))
        if expected - set(second.snapshots) - set(absent) or not (second.snapshots or absent):
            return None
        found = diagnose(second, first, expected, absent, quiet)
        found.run_id, found.cut_by = self.run_id, tuple(self.cut_by())
        return found

    def judge(self, first: Optional[Probe], second: Probe, quiet: float, now: float) -> Optional[HangDiagnosis]:
        found = self.verdict(first, second, quiet)
        if found is None:
            return None
        if not found.hung:  # working quietly: say so, then again now and then, and count it as progress
            quiet_in_all = self.quiet_for(now)
            found.quiet_s, self.working = quiet_in_all, found
            self.diagnosis, self.said_hung = None, False  # no longer hung: an earlier verdict no longer holds
            if not self.said_busy:
                for line in found.lines():
                    self.say(line)
                # at 4 times the threshold, or twice the quiet time this first look came at where
                # ranks slow to answer put it off (seen at 108 s of a 30 s threshold: the reminder came one look later)
                self.busy_reminder_at = max(BUSY_REMINDER_FACTOR * (self.threshold or 0.0), 2 * quiet_in_all)
            elif quiet_in_all >= self.busy_reminder_at:
                self.say(f"still no output after {quiet_in_all:.0f} s, and the job still works: {found.doing};"
                         f" {found.where_they_wait()}")
                self.busy_reminder_at *= 2
            if self.end_after_s is not None and quiet_in_all >= self.end_after_s and not self.said_not_ended:
                self.said_not_ended = True
                self.say(not_ended_note(self.end_after_s, found, self.collective_timeout_s))
            self.last_progress = now
            self.said_busy = True
            return None
        self.diagnosis = found
        if self.end_after_s is not None and quiet >= self.end_after_s:
            found.cause = f"no progress for {quiet:.0f} s (--hang-timeout {self.end_after_s:g})"
            return found
        if not self.said_hung:
            self.said_hung = True
            self.say(f"the job looks hung: {found.headline}")
            for line in found.lines()[1:]:
                self.say(line)
            if self.end_after_s is None:
                self.say("the run goes on; --hang-timeout S ends a run that makes no progress for S seconds")
        return None
