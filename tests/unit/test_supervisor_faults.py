"""The run's own faults as the supervisor does them, on the fake engine: storage faults armed for
a node's workers at their step and what the supervisor does when a worker meets one (a torn
write's node killed as a crash mid-save, a full disk said), faults with an end undone, a preempt's
SIGKILL after the stop grace, and the record of faults that never fired. The workers' side (the
file cut at a byte, ENOSPC) is in test_storage_faults.py; here a node's script writes what a
worker records."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from orchestrate.config.fault_spec import parse_fault
from orchestrate.faults import storage
from orchestrate.faults.live_notes import new_fault_id, note_live_fault
from orchestrate.node.storage_faults import EVENTS_FILE
from orchestrate.outcome.events import read_events
from orchestrate.outcome.summary import format_summary
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_launcher import once_followed, progress_writer, report, run

NODE0, NODE1 = "ddp-test-run-node0-1", "ddp-test-run-node1-1"


def wait_for(condition, what: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)
    return found


def met(job, kind: str, node: str, rank: int, file: str, key: str = "", **cut) -> None:
    """What a worker of ``node`` records when it meets the storage fault armed for it (the first
    listed, or ``key``)."""
    progress = job.run_dir / "progress"
    if not key:
        key = wait_for(lambda: storage.armed(progress), "the fault armed")[0]["key"]
    with open(progress / EVENTS_FILE, "a") as handle:
        handle.write(json.dumps({"kind": kind, "key": key, "node": node, "file": file, "rank": rank, **cut}) + "\n")


def test_a_torn_write_is_armed_at_its_step_over_the_last_save_said_where_it_cut_and_its_node_killed(make_run):
    fault = "torn-write:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),))
    client = FakeDockerClient()

    def save_then_tear() -> None:
        saved = Path(job.request.workdir) / "ckpt" / "step-1.pt"  # just before the fault's step
        saved.parent.mkdir()
        saved.write_bytes(b"saved")
        progress_writer(job, 1, range(1, 3))()  # a worker holds at a fault's step until it is done
        met(job, "torn-write", "node1", 1, "ckpt/step-2.pt", byte=10, size=100)

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], after_when=lambda: ("kill", NODE1) in client.calls,
                                   after=["[0|0]:peer lost"], exit_code=1)],
        node1=[Script(["[1|0]:training"], then=once_followed(job, "node1")(save_then_tear), hang=True)])
    cut = "rank 1's write of ckpt/step-2.pt was cut at byte 10 of 100"
    assert (f"{fault}: armed on node1's workers, files 'ckpt/*' of the work directory: the next write is cut short,"
            " and the node killed") in text
    assert f"{fault}: {cut}" in text and "killing node1: a crash in the middle of the save" in text
    assert [c for c in client.calls if c[0] == "kill" and c[1] == NODE1] == [("kill", NODE1)]  # SIGKILL, once
    assert storage.armed(job.run_dir / "progress") == []  # torn once: disarmed
    [event] = [e for e in read_events(job.run_dir) if e["event"] == "storage-fault"]
    assert {k: v for k, v in event.items() if k != "time"} == {
        "event": "storage-fault", "node": "node1", "spec": fault, "storage": "torn-write", "file": "ckpt/step-2.pt",
        "rank": 1, "byte": 10, "size": 100}
    [record] = outcome.faults
    assert (record.spec, record.fired, record.step, record.detail) == (fault, True, 2, cut)
    assert record.struck_time is not None and record.struck_time >= record.fired_time  # at the cut, after it was armed
    assert record.struck_file == "ckpt/step-2.pt"
    assert {r.node.name: r.fault for r in outcome.results}["node1"] == fault


def test_a_full_disk_is_blamed_from_its_step_said_and_its_node_left_to_fail_by_itself(make_run):
    fault = "disk-full:node0@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),))
    client = FakeDockerClient()
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(lambda: (
                          progress_writer(job, 0, range(1, 4))(), met(job, "disk-full", "node0", 0, "out.pt"))),
                      after_when=lambda: "no space left" in job.out.getvalue(),
                      after=["[0|0]:OSError: [Errno 28] No space left on device"], exit_code=1)],
        node1=[Script(["[1|0]:training"], after_when=lambda: "node0 failed" in job.out.getvalue(),
                      after=["[1|0]:peer lost"], exit_code=1)])
    assert (f"{fault}: armed on node0's workers, files '*' of the work directory: writes fail with ENOSPC"
            in text)
    assert f"{fault}: rank 0's write to out.pt failed: no space left on device (ENOSPC)" in text
    assert "killing node0" not in text and [c for c in client.calls if c[0] == "kill" and c[1] == NODE0] == []
    assert {r.node.name: r.fault for r in outcome.results}["node0"] == fault  # blamed from its step
    assert outcome.failure.node == "node0"


def test_a_full_disk_an_elastic_job_meets_again_after_its_restart_is_blamed_once_more_and_ends_it(make_run):
    """The trial: a full disk whose window the resumed steps never passed. Its node's torchrun gave up
    in each life; the restart let the fault's blame go, so the run ended blaming the worker's own
    error, not the fault, and the summary said the same failed write once for every attempt."""
    fault = "disk-full:node0@step=2..9"
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=(parse_fault(fault),))
    client = FakeDockerClient()
    failed = "rank 0's write to out.pt failed: no space left on device (ENOSPC)"

    def said(times: int):
        return lambda: job.out.getvalue().count(f"{fault}: {failed}") >= times

    def save_on_the_full_disk() -> None:
        progress_writer(job, 0, range(1, 4))()
        met(job, "disk-full", "node0", 0, "out.pt")

    raised = report(0, 0, exc="RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos 3712 vs 3664")
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(save_on_the_full_disk), after_when=said(1),
                      after=raised, exit_code=1),
               Script(["[0|0]:resumed"], then=lambda: met(job, "disk-full", "node0", 0, "out.pt"), after_when=said(2),
                      after=raised, exit_code=1)],
        node1=[Script(["[1|0]:training"], hang=True),
               Script(["[1|0]:again"], after_when=lambda: "node0 failed" in job.out.getvalue(),
                      after=["[1|0]:peer lost"], exit_code=1)])
    gave_up = (f"node0's torchrun gave up (exit code 1): a rank's write failed and its worker raised under injected"
               f" fault {fault}")
    assert f"{gave_up}; restarting every node so that it rejoins (1/3); {fault} outlives a restart" in text
    assert f"{gave_up} again, after a restart: the fault outlives a restart and still holds" in text
    assert [c for c in client.calls if c[0] == "restart" and c[1] == NODE0] == [("restart", NODE0)]  # once only
    assert f"failed (injected fault {fault})" in outcome.failure.describe(), text  # (not the worker's own error)
    assert f"fault injected: {fault} (" in format_summary(outcome)
    assert format_summary(outcome).count(failed) == 1 and f"{failed}, 2 times" in format_summary(outcome)


def test_a_full_disk_a_restart_in_place_meets_again_ends_the_job_at_once(make_run):
    """The trial: torchrun restarted the workers in place, each attempt failed the same write on the
    full disk, until its restarts ran out (8 attempts over two lives of the container), though none
    could get past the fault. The second attempt to meet the same firing stops the node: the job
    ends, naming the fault, with no restart of the launcher's."""
    fault = "disk-full:node0@step=2"
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=(parse_fault(fault),), timeout_s=20.0)
    client = FakeDockerClient()

    def two_attempts_on_the_full_disk() -> None:
        progress_writer(job, 0, range(1, 4))()
        first = time.time()
        met(job, "disk-full", "node0", 0, "out.pt", attempt=0, time=first)
        met(job, "disk-full", "node0", 0, "opt.pt", attempt=0, time=first + 0.5)  # the same attempt's: no restart
        wait_for(lambda: "opt.pt failed: no space left" in job.out.getvalue(), "the first attempt's writes said")
        for attempt in ("attempt_0", "attempt_1"):  # each attempt's log of its worker, as torchrun keeps it
            log = job.run_dir / "node0" / "torchrun" / "run_1" / attempt / "0" / "stderr.log"
            log.parent.mkdir(parents=True)
            log.write_text("".join(f"[rank0]: {line}\n" for line in (
                "Traceback (most recent call last):", '  File "/workspace/train.py", line 23, in <module>',
                '    torch.save(state, "out.pt")', "RuntimeError: [enforce fail at inline_container.cc:664] . unexpected"
                " pos 896 vs 790")))
        met(job, "disk-full", "node0", 0, "out.pt", attempt=1, time=first + 3.0)  # the next attempt's

    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(two_attempts_on_the_full_disk), hang=True)],
        node1=[Script(["[1|0]:training"], after_when=lambda: "node0 failed" in job.out.getvalue(),
                      after=["[1|0]:peer lost"], exit_code=1)])
    again = (f"{fault}: rank 0's write to out.pt failed again in attempt 2 of node0's workers, after torchrun"
             " restarted them in place (2.5 s after attempt 1's): the full disk still holds (it has no end), so every"
             " restart would meet it again; stopping node0, and the job ends")
    assert again in text, text
    assert [c for c in client.calls if c[0] == "kill" and c[1] == NODE0] == [("kill", NODE0)]
    assert not [c for c in client.calls if c[0] == "restart"], text  # no restart of the launcher's either
    assert outcome.failure.node == "node0"
    # torchrun printed no report of the attempt it was stopped in: its worker's log names the error
    assert outcome.failure.describe() == (f"node0 rank 0 failed (injected fault {fault}): RuntimeError: [enforce fail"
                                          " at inline_container.cc:664] . unexpected pos 896 vs 790")
    assert "in your code: train.py:23 in <module>" in format_summary(outcome), format_summary(outcome)
    assert text.count(again) == 1 and "again, after a restart" not in text  # said once, where it ended the job
    assert [e["in_place"] for e in read_events(job.run_dir) if e["event"] == "met-again"] == [True]


def runs_on_with_nothing_stopped(job, client, on_node0) -> None:
    """Run ``job`` with node0 doing ``on_node0`` (two full-disk events) as it starts: both failed
    writes are said, the job trains on to its end, and no node is stopped."""
    twice = lambda: job.out.getvalue().count("out.pt failed: no space left") >= 2  # noqa: E731
    outcome, text, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(on_node0),
                      after_when=twice, after=["[0|0]:step 9"])],
        node1=[Script(["[1|0]:training"], after_when=twice, after=["[1|0]:step 9"])])
    assert twice() and outcome.succeeded, text
    assert "failed again" not in text and [c for c in client.calls if c[0] == "kill"] == []


def test_a_full_disk_whose_end_comes_before_the_last_attempts_write_stops_nothing(make_run):
    """A window that ends before a restarted attempt would reach the write again: the restart may
    get past it, and the job is not ended early. The attempts' times are their events' own (100 s
    apart), and the window's end (60 s into the job) does not come while the test runs: without
    the weighing of its end the full disk would hold, on any machine."""
    fault = "disk-full:node0@t=0..60"
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=(parse_fault(fault),), timeout_s=20.0)
    client = FakeDockerClient()

    def two_attempts_on_the_full_disk() -> None:
        first = time.time()
        met(job, "disk-full", "node0", 0, "out.pt", attempt=0, time=first)
        wait_for(lambda: "out.pt failed: no space left" in job.out.getvalue(), "the first failed write said")
        met(job, "disk-full", "node0", 0, "out.pt", attempt=1, time=first + 100.0)  # its end comes first

    runs_on_with_nothing_stopped(job, client, two_attempts_on_the_full_disk)


def test_a_full_disk_after_an_attempt_that_caught_its_failed_write_and_went_on_stops_nothing(make_run):
    """Attempt 0's script caught its failed save and trained on (its rank reported a step after
    it); torchrun restarted the workers for another reason, and attempt 1 failed the write again
    and caught it too: no attempt was ended by the full disk, and the job would finish."""
    fault = "disk-full:node0@step=2"
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=(parse_fault(fault),), timeout_s=20.0)
    client = FakeDockerClient()

    def two_attempts_on_the_full_disk() -> None:
        progress_writer(job, 0, range(1, 4))()
        first = time.time()
        with open(job.run_dir / "progress" / "rank0.jsonl", "a") as handle:  # attempt 0 went on after it
            handle.write(json.dumps({"rank": 0, "attempt": "a", "began": first - 5.0, "step": 4, "loss": 0.5,
                                     "time": first + 1.0}) + "\n")
        met(job, "disk-full", "node0", 0, "out.pt", attempt=0, time=first)
        wait_for(lambda: "out.pt failed: no space left" in job.out.getvalue(), "the first failed write said")
        met(job, "disk-full", "node0", 0, "out.pt", attempt=1, time=first + 3.0)

    runs_on_with_nothing_stopped(job, client, two_attempts_on_the_full_disk)


def test_a_late_event_of_an_earlier_containers_torchrun_stops_nothing(make_run):
    """The container's torchrun (attempt 0) failed a write; then an event of the torchrun of the
    container before this start (its attempt 1, from before the latest start) is read late: it is
    no attempt of this torchrun's, and does not stop the new container."""
    fault = "disk-full:node0@step=2"
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=(parse_fault(fault),), timeout_s=20.0)
    client = FakeDockerClient()

    def a_new_attempt_then_an_old_one() -> None:
        progress_writer(job, 0, range(1, 4))()
        now = time.time()
        met(job, "disk-full", "node0", 0, "out.pt", attempt=0, time=now)
        wait_for(lambda: "out.pt failed: no space left" in job.out.getvalue(), "the first failed write said")
        met(job, "disk-full", "node0", 0, "out.pt", attempt=1, time=now - 1000.0)  # before the container started

    runs_on_with_nothing_stopped(job, client, a_new_attempt_then_an_old_one)


def test_faults_with_an_end_are_undone_and_their_blame_goes_with_them(make_run):
    disk, slow = "disk-full:node0@step=2..3", "slow:node1,cpus=0.25@step=2..3"
    job = make_run(nodes=2, faults=(parse_fault(disk), parse_fault(slow)))
    client = FakeDockerClient()

    def ended() -> bool:  # the quota given back, the disk no longer full
        updates = [c for c in client.calls if c[0] == "update" and c[1] == NODE1]
        return len(updates) == 2 and storage.armed(job.run_dir / "progress") == []

    keys = []

    def steps_held_at_the_faults() -> None:  # a save that fails on the full disk, which the script lets pass
        progress_writer(job, 0, range(1, 3))()
        keys.append(wait_for(lambda: storage.armed(job.run_dir / "progress"), "the disk full")[0]["key"])
        met(job, "disk-full", "node0", 0, "step-2.pt")
        wait_for(lambda: "rank 0's write to step-2.pt failed" in job.out.getvalue(), "the failed write said")
        progress_writer(job, 0, range(3, 5))()

    def a_late_event_read_after_the_end() -> bool:
        """A review (session 116): an event of the full disk read only after its window ended
        blamed node0 again, though nothing holds it."""
        if not ended():
            return False
        if len(keys) == 1:
            keys.append("")
            met(job, "disk-full", "node0", 0, "step-3.pt", key=keys[0])
        return "rank 0's write to step-3.pt failed" in job.out.getvalue()

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(steps_held_at_the_faults),
                                   after_when=a_late_event_read_after_the_end,
                                   after=["[0|0]:done"])],
        node1=[Script(["[1|0]:training"], after_when=ended, after=["[1|0]:done"])])
    assert ended() and outcome.succeeded, text
    assert {r.node.name: (r.fault, r.culprit_rank) for r in outcome.results} == {"node0": ("", None),
                                                                                  "node1": ("", None)}
    assert [(r.spec, r.fired, r.step) for r in outcome.faults] == [(disk, True, 2), (slow, True, 2)]


def test_a_full_disk_that_failed_no_write_while_it_lasted_did_not_fire_and_fails_the_run(make_run):
    """A script that saves with os.write(), which the workers' hook does not reach: the job went
    well, but the fault asked for tested nothing, and the run says so instead of succeeding."""
    disk = "disk-full:node0@step=2..3"
    job = make_run(nodes=1, faults=(parse_fault(disk),))
    client = FakeDockerClient()

    def steps_through_the_fault_writing_nothing_it_reaches() -> None:
        progress_writer(job, 0, range(1, 3))()
        wait_for(lambda: storage.armed(job.run_dir / "progress"), "the disk full")
        progress_writer(job, 0, range(3, 5))()

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"],
                                   then=once_followed(job, "node0")(steps_through_the_fault_writing_nothing_it_reaches),
                                   after_when=lambda: storage.armed(job.run_dir / "progress") == [],
                                   after=["[0|0]:done"])])
    assert outcome.job_succeeded and not outcome.succeeded and outcome.exit_code == 1, text
    [record] = outcome.faults
    assert (record.spec, record.fired) == (disk, False)
    assert record.reason.startswith("it was armed ") and "but no worker of node0 wrote a file it reaches meanwhile" \
        in record.reason
    summary = format_summary(outcome)
    assert f"fault not fired: {disk} did not fire: it was armed" in summary
    assert summary.splitlines()[-1] == f"FAILED: its 1 node exited 0, but 1 fault(s) asked for never fired: {disk}", summary


def test_a_storage_fault_armed_from_another_terminal_is_named_by_its_kind_and_its_torn_node_killed(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()
    armed: list[str] = []

    def armed_by_fault_run_then_torn() -> None:
        armed.append(storage.arm(job.run_dir / "progress", parse_fault("torn-write:node1"), "node1", "*"))
        met(job, "torn-write", "node1", 1, "model.pt", key=armed[0], byte=0, size=8)

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], after_when=lambda: ("kill", NODE1) in client.calls,
                                   after=["[0|0]:peer lost"], exit_code=1)],
        node1=[Script(["[1|0]:training"], then=once_followed(job, "node1")(armed_by_fault_run_then_torn), hang=True)])
    assert "torn-write:node1: rank 1's write of model.pt was cut at byte 0 of 8" in text
    assert ("kill", NODE1) in client.calls
    assert [f["key"] for f in storage.armed(job.run_dir / "progress")] == armed  # `fault RUN`'s to disarm
    assert {r.node.name: r.fault for r in outcome.results}["node1"] == "torn-write:node1"


def test_a_storage_fault_armed_and_noted_from_another_terminal_is_named_by_its_spec_and_fired_where_met(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()
    spec = parse_fault("torn-write:node1,path=*.pt")

    def armed_and_noted_by_fault_run_then_torn() -> None:
        key = storage.arm(job.run_dir / "progress", spec, "node1", "*.pt")
        note_live_fault(job.run_dir, new_fault_id(), spec, "node1", "done", storage_key=key)
        wait_for(lambda: "fault armed by `python -m orchestrate fault`" in job.out.getvalue(), "the note read")
        met(job, "torn-write", "node1", 1, "model.pt", key=key, byte=3, size=8)

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], after_when=lambda: ("kill", NODE1) in client.calls,
                                   after=["[0|0]:peer lost"], exit_code=1)],
        node1=[Script(["[1|0]:training"], then=once_followed(job, "node1")(armed_and_noted_by_fault_run_then_torn),
                      hang=True)])
    assert f"{spec}: rank 1's write of model.pt was cut at byte 3 of 8" in text
    assert {r.node.name: r.fault for r in outcome.results}["node1"] == str(spec)
    [record] = outcome.faults
    assert record.fired and record.detail == "rank 1's write of model.pt was cut at byte 3 of 8"


def test_a_preempt_sends_sigterm_at_its_step_and_sigkill_only_after_the_stop_grace(make_run):
    fault = "preempt:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),), stop_grace=1)
    client = FakeDockerClient()
    outcome, _, _ = run(
        job, client, node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(progress_writer(job, 0, range(1, 4))),
                                   after_when=lambda: ("kill", NODE1) in client.calls, after=["[0|0]:peer lost"],
                                   exit_code=1)],
        node1=[Script(["[1|0]:training"], hang=True, ignore_sigterm=True)])
    sent = [c[2] if len(c) > 2 else "SIGKILL" for c in client.calls if c[0] == "kill" and c[1] == NODE1]
    assert sent == ["SIGTERM", "SIGKILL"]
    events = read_events(job.run_dir)
    preempted = next(e["time"] for e in events if e["event"] == "fault" and e.get("spec") == fault)
    killed = next(e["time"] for e in events if e["event"] == "node-killed" and e["node"] == "node1")
    assert killed - preempted >= 0.95  # never before the grace


def test_faults_that_never_fired_say_why_with_the_jobs_own_step_and_time(make_run):
    # the job reaches step 3 and ends at once: a fault at step 50 and one at t=100 s never come;
    # a fault done from another terminal before the first step is marked so
    job = make_run(nodes=2, faults=(parse_fault("kill:node1@step=50"), parse_fault("kill:node0@t=100")))
    client = FakeDockerClient()

    def live_fault_then_steps() -> None:
        fault_id = new_fault_id()
        for phase in ("doing", "done"):
            note_live_fault(job.run_dir, fault_id, parse_fault("slow:node1"), "node1", phase)
        wait_for(lambda: "fault injected by `python -m orchestrate fault`" in job.out.getvalue(), "the note read")
        progress_writer(job, 0, range(1, 4), attempt="first")()  # steps taken now, after the fault

    steps = job.run_dir / "progress" / "rank0.jsonl"
    outcome, _, _ = run(job, client, node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(live_fault_then_steps))],
                        node1=[Script(["[1|0]:training"], after_when=steps.exists, after=["[1|0]:done"])])
    by_spec = {r.spec: r for r in outcome.faults}
    assert by_spec["kill:node1@step=50"].reason == "the workers reached step 3 only, not step 50"
    ended = re.fullmatch(r"the job ended (\d+\.\d) s in, before t=100 s", by_spec["kill:node0@t=100"].reason)
    assert ended and float(ended.group(1)) < 20, by_spec["kill:node0@t=100"].reason
    live = by_spec["slow:node1,cpus=0.25"]
    assert live.fired and live.before_first_step


def test_storage_events_of_an_ended_node_or_one_not_in_the_run_are_said_and_nothing_is_killed(make_run):
    # node1 has finished: a torn write recorded for it afterwards (armed by `fault RUN`) kills
    # nothing, nor does one for a node the run does not have, and the run's own storage fault on
    # it can no longer be armed
    fault = "torn-write:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),))
    client = FakeDockerClient()

    def after_node1_finished() -> None:
        wait_for(lambda: job.backend.supervisor.trackers["node1"].phase.final, "node1 finished")
        met(job, "torn-write", "node1", 1, "a.pt", key="elsewhere", byte=1, size=2)
        met(job, "torn-write", "node7", None, "b.pt", key="elsewhere", byte=0, size=4)
        progress_writer(job, 0, range(1, 3))()

    outcome, text, _ = run(
        job, client, node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(after_node1_finished),
                                   after_when=lambda: "could not be injected" in job.out.getvalue(),
                                   after=["[0|0]:done"])],
        node1=[Script(["[1|0]:done"])])
    assert "torn-write:node1: rank 1's write of a.pt was cut at byte 1 of 2" in text
    assert "torn-write:node7: a worker of node7's write of b.pt was cut at byte 0 of 4" in text
    assert "killing" not in text and [c for c in client.calls if c[0] == "kill"] == []
    [record] = outcome.faults
    assert (record.spec, record.fired, record.reason) == (fault, False, "could not be injected: node1 is not running")
