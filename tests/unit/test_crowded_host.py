"""The hang watchdog on a crowded host: ranks that compute slowly (importing torch, building DDP at
4-5% of a core, load 30-54 on 2 cores in a user's trial) are working, not hung; real hangs (a rank
asleep, at a lock, in input()) still are, and say why; what the progress was is said as it was."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from orchestrate.hangs.diagnosis import BUSY_CPU_SHARE, SLOW_CPU_SHARE, diagnose
from orchestrate.hangs.snapshots import Frame, RankSnapshot
from tests.unit.test_hangs import Watched, coll, probe, snap, stack

RECORDED = Path(__file__).parent / "data" / "crowded_import"


def recorded(rank: int) -> RankSnapshot:
    """Rank ``rank``'s record at the trial's last look (see data/crowded_import/README.md)."""
    return RankSnapshot.from_json(json.loads((RECORDED / f"rank{rank}.json").read_text()))


def earlier(snapshot: RankSnapshot, seconds: float, share: float, frames_fewer: int = 0) -> RankSnapshot:
    """The same process ``seconds`` before, having used ``share`` of a core since, its import that
    many frames less deep."""
    stack = snapshot.stack[:len(snapshot.stack) - frames_fewer] if frames_fewer else snapshot.stack
    return dataclasses.replace(snapshot, cpu_s=snapshot.cpu_s - share * seconds, stack=stack,
                               time=snapshot.time - seconds)


SLEEPING = (Frame("wait.py", 9, "<module>", "time.sleep(3600)"),)
SPINNING = (Frame("spin.py", 4, "<module>", "pass"),)


def test_the_recorded_ranks_importing_torch_at_4_percent_of_a_core_are_working_not_hung():
    """The trial's records: both ranks in DDP(...) at line 6, importing, each at 4.5% of a core,
    their stacks deeper at the second look. The watchdog said both idle and ended the run HUNG."""
    now = probe(5, r0=recorded(0), r1=recorded(1))
    before = probe(0, r0=earlier(recorded(0), 5, 0.045, frames_fewer=3), r1=earlier(recorded(1), 5, 0.045, 2))
    found = diagnose(now, before, {0, 1}, {}, 30)
    assert not found.hung
    assert [a.state for a in found.activities] == ["busy", "busy"]
    assert found.headline == "no output for 30 s, but the job is working: ranks 0, 1 computing"
    # a host more crowded still (1% of a core each): their stacks moved between the looks, so they run
    starved = diagnose(now, probe(0, r0=earlier(recorded(0), 5, 0.01, frames_fewer=3),
                                  r1=earlier(recorded(1), 5, 0.01, frames_fewer=2)), {0, 1}, {}, 30)
    assert not starved.hung and starved.progress == "rank 0 computing (its stack moved between the looks)"
    assert starved.activities[1].detail == "computing: its stack moved between the looks (1.0% of a core)"
    # ... and at one stack at both looks, 1% of a core is what a waiting rank may use: idle
    still = diagnose(now, probe(0, r0=earlier(recorded(0), 5, 0.01), r1=earlier(recorded(1), 5, 0.01)), {0, 1}, {}, 30)
    assert still.hung


def test_a_rank_at_a_few_percent_of_a_core_computes_where_no_rank_waits_on_another():
    """The same stack at both looks (a look may catch one frame twice): its CPU alone says it
    computes, at SLOW_CPU_SHARE where no rank waits on another; where one waits in a collective,
    BUSY_CPU_SHARE still holds (a wait may spin a little)."""
    same = probe(5, r0=recorded(0), r1=recorded(1))
    before = probe(0, r0=earlier(recorded(0), 5, 0.03), r1=earlier(recorded(1), 5, 0.03))
    found = diagnose(same, before, {0, 1}, {}, 30)
    assert not found.hung and found.activities[0].detail == "computing (3% of a core)"
    assert SLOW_CPU_SHARE <= 0.03 < BUSY_CPU_SHARE
    waiting = (coll(1), coll(2, state="entered"))
    beside_a_wait = diagnose(probe(5, r0=recorded(0), r1=snap(1, waiting)),
                             probe(0, r0=earlier(recorded(0), 5, 0.03), r1=snap(1, waiting)), {0, 1}, {}, 30)
    assert beside_a_wait.hung and [a.state for a in beside_a_wait.activities] == ["idle", "collective"]


def test_a_rank_asleep_or_at_a_lock_alone_is_still_hung_and_its_headline_says_idle_with_its_cpu():
    asleep = diagnose(probe(5, r0=snap(0, frames=SLEEPING, cpu_s=1.01), r1=snap(1, frames=SLEEPING, cpu_s=1.0)),
                      probe(0, r0=snap(0, frames=SLEEPING, cpu_s=1.0), r1=snap(1, frames=SLEEPING, cpu_s=1.0)),
                      {0, 1}, {}, 30)
    assert asleep.hung
    assert asleep.headline == ("no progress for 30 s: ranks 0, 1: <module> at wait.py:9; rank 0 idle: neither computing"
                               " nor in a collective (0.2% of a core); rank 1 idle: neither computing nor in a"
                               " collective (0.0% of a core)")
    # ranks that wait in a collective say why where they wait: no idle note
    waiting = (coll(1), coll(2, state="entered"))
    in_collective = diagnose(probe(5, r0=snap(0, waiting), r1=snap(1, waiting)),
                             probe(0, r0=snap(0, waiting), r1=snap(1, waiting)), {0, 1}, {}, 30)
    assert in_collective.hung and "idle" not in in_collective.headline
    # a wait on other ranks whose frames inside torch differ between the looks (a retry loop) is still a wait
    retrying = tuple(dataclasses.replace(f, line=f.line + 7) if "distributed_c10d" in f.file else f for f in stack(11))
    moved_inside = diagnose(probe(5, r0=snap(0, waiting, frames=retrying), r1=snap(1, waiting)),
                            probe(0, r0=snap(0, waiting), r1=snap(1, waiting)), {0, 1}, {}, 30)
    assert moved_inside.hung


def test_a_rank_spinning_in_one_frame_is_computing_as_before():
    """``while True: pass``: one frame at every look, a whole core: no look tells it from a long
    step, so it is working (said again less and less often), as a rank in a long step is."""
    found = diagnose(probe(5, r0=snap(0, frames=SPINNING, cpu_s=6.0)), probe(0, r0=snap(0, frames=SPINNING)),
                     {0}, {}, 30)
    assert not found.hung and found.activities[0].detail == "computing (100% of a core)"


def test_a_rank_that_missed_the_first_look_is_no_progress_by_itself_and_a_restart_is_said_as_one():
    """The trial said "the job is working: collectives completing" before any collective: a rank
    missing from the first look counted as progress, and the fallback named collectives."""
    missed = diagnose(probe(5, r0=snap(0, frames=SLEEPING), r1=snap(1, frames=SLEEPING)),
                      probe(0, r0=snap(0, frames=SLEEPING)), {0, 1}, {}, 30)
    assert missed.hung and missed.progress == ""
    restarted = diagnose(probe(5, r0=snap(0, frames=SLEEPING, pid=300), r1=snap(1, frames=SLEEPING)),
                         probe(0, r0=snap(0, frames=SLEEPING), r1=snap(1, frames=SLEEPING)), {0, 1}, {}, 30)
    assert not restarted.hung
    assert restarted.headline == "no output for 30 s, but the job is working: rank 0 restarted"
    completed = diagnose(probe(5, r0=snap(0, (coll(1), coll(2))), r1=snap(1, frames=SLEEPING)),
                         probe(0, r0=snap(0, (coll(1),)), r1=snap(1, frames=SLEEPING)), {0, 1}, {}, 30)
    assert completed.headline == "no output for 30 s, but the job is working: collectives completing"


def test_a_working_job_first_said_late_is_said_again_at_twice_that_quiet_time_not_one_look_later():
    """Ranks slow to answer put the first look off (108 s at a 30 s threshold in the trial): the
    reminder came at the next look (189 s), not at twice the first."""
    looping = (Frame("train.py", 80, "main"), Frame("train.py", 31, "evaluate"))
    busy = [probe(0, r0=snap(0, (coll(1),), looping, cpu_s=10.0 + 5 * i), r1=snap(1, (coll(1),), looping,
                                                                               cpu_s=10.0 + 5 * i))
            for i in range(80)]
    unanswered = [probe(0, r0=snap(0, (coll(1),), looping)) for _ in range(38)]  # rank 1 busy, not answering
    watched = Watched(unanswered + busy, diagnose_after_s=30, end_after_s=None)
    watched.watch.progress(0.0)
    assert watched.until(1100) is None
    first = next(line for line in watched.said if line.startswith("no output for"))
    first_s = int(re.match(r"no output for (\d+) s", first)[1])
    assert first_s > 4 * 30  # put off past the usual reminder
    again = [int(re.match(r"still no output after (\d+) s", line)[1]) for line in watched.said
             if line.startswith("still")]
    assert len(again) >= 2 and again[0] >= 2 * first_s and again[1] >= 4 * first_s, (first_s, again)
