"""The judge of a run (outcome/judge.py), field by field: which failure a run is reported for,
every field of it, and the words a user reads. Most cases compare the whole Failure or the whole
text, so that a changed field or word fails here (a tool's mutants showed where test_outcome.py's
looser checks let one through); the rest check the one field their case is about."""
from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrate.outcome.judge import (Failure, absent_from_barrier_lines, compiler_hint, device_ordinal_hint,
                                       died_at_exit, diverged_hint, find_failure, interface_hint, lost_peer_lines,
                                       made_alone_hint, mismatch_hint, missing_module_hint, no_gpu_hint, no_terminal_hint,
                                       repeated_error_line, signal_name, torn_save_hint, uneven_hint)
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.root_cause import AttemptError, EarlierFailure, RootCause
from orchestrate.outcome.states import NodePhase

LOST_PEER = "RuntimeError: Connection closed by peer"
MISMATCH = ("gloo::EnforceNotMet: [enforce fail at pair.cc:456] 8 vs 4. Received data size doesn't match expected size."
            " Is there a distributed collective mismatch in your code?")
UNEVEN = "(do all ranks run the same number of steps?)"


@pytest.fixture
def nodes(make_job):
    """The node plans of a job of ``count`` nodes with ``per_node`` ranks each."""
    def make(count: int = 2, per_node: int = 2, **options):
        return make_job(nodes=count, nproc_per_node=per_node, **options).nodes
    return make


def ended(node, state=NodePhase.FAILED, code=1, at=1.0, cause=None, **fields) -> NodeResult:
    result = NodeResult(node, state, code, wall_s=at, ended_at=at, root_cause=cause,
                        last_lines=[f"{node.name} said", f"{node.name}'s last line"])
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def succeeded(node, at=1.0, **fields) -> NodeResult:
    return ended(node, NodePhase.SUCCEEDED, 0, at, **fields)


def lines_of(node) -> tuple[str, ...]:
    return (f"{node.name} said", f"{node.name}'s last line")


# -- Failure.describe and signal_name


def test_a_failure_without_a_rank_names_its_node_alone():
    assert Failure("node1", None, 1, "", ()).describe() == "node1 failed (exit code 1)"
    assert Failure("node1", None, -9, "", ()).describe() == "node1 failed (exit code -9, SIGKILL)"
    assert Failure("node1", 0, 1, "ValueError: x", ()).describe() == "node1 rank 0 failed (exit code 1): ValueError: x"


def test_a_refusal_is_explained_by_its_last_line_only():
    refused = Failure("node0", 2, 2, "", ("usage: train.py [-h]", "some earlier line", "error: --epochs must be > 0"))
    assert refused.describe() == "node0 rank 2 failed (exit code 2): error: --epochs must be > 0"
    assert Failure("node0", 2, 2, "", ("usage: train.py", "", "error: x")).describe() == \
        "node0 rank 2 failed (exit code 2): error: x"
    # a blank last line explains nothing, even after a line that would
    assert Failure("node0", 2, 2, "", ("error: earlier", "  ")).describe() == "node0 rank 2 failed (exit code 2)"
    # another exit code's last line is no reason
    assert Failure("node0", 2, 3, "", ("error: x",)).describe() == "node0 rank 2 failed (exit code 3)"


def test_a_signal_name_is_given_only_for_a_signal():
    assert [signal_name(code) for code in (None, 0, 1, 143)] == ["", "", "", ""]
    assert (signal_name(-11), signal_name(-6), signal_name(-15)) == ("SIGSEGV", "SIGABRT", "SIGTERM")
    assert signal_name(-40) == ""  # a real-time signal has no name of its own


# -- find_failure: nodes lost for good


def test_the_latest_lost_node_explains_the_nodes_left_only_until_they_trained_on_without_it(nodes):
    node0, node1, node2 = nodes(3, 1)
    left = ended(node0, at=9.0, cause=RootCause(0, 0, 1, LOST_PEER))
    first = ended(node1, NodePhase.LOST, 137, at=2.0, lost="lose:node1@t=2")
    then = ended(node2, NodePhase.LOST, 137, at=5.0, lost="lose:node2@t=5")
    failure = find_failure([left, first, then])
    assert failure.describe() == ("node2 was lost for good (injected fault lose:node2@t=5), and the nodes left could"
                                  " not go on without it: node0 failed")
    assert (failure.last_lines, failure.lines_of) == (lines_of(node0), "node0")
    then.went_on_without = True  # they trained on after it: their later lost peer is another story
    assert find_failure([left, first, then]).describe() == f"node0 rank 0 failed (exit code 1): {LOST_PEER}"


# -- find_failure: a node that ran out of memory


def test_an_oom_kill_explains_the_run_with_the_killed_rank_and_the_nodes_own_exit(nodes):
    node0, node1 = nodes()
    results = [ended(node0, cause=RootCause(0, 0, 1, LOST_PEER, timestamp=1.0)),
               ended(node1, code=1, at=2.0, cause=RootCause(3, 1, -9, "Signal 9 (SIGKILL)", traceback="tb"),
                     oom_kills=2)]
    assert find_failure(results) == Failure(
        "node1", 3, 1, "", lines_of(node1),
        reason="OOM-killed: the kernel killed 2 process(es) at the node's memory limit (rank 3 killed); raise"
               " --memory-per-node or use less memory")
    # where the ranks reported their steps: the killed rank's latest, not its node's other rank's
    results[1].steps_reached = {2: 7, 3: 4}
    assert find_failure(results).reason == ("OOM-killed: the kernel killed 2 process(es) at the node's memory limit"
                                            " after step 4 (rank 3 killed); raise --memory-per-node or use less memory")


def test_an_oom_kill_of_no_known_rank_says_the_latest_step_of_its_nodes_ranks(nodes):
    node0, node1 = nodes()
    results = [succeeded(node0, steps_reached={0: 9}),
               ended(node1, code=137, oom_kills=1, steps_reached={1: 5, 2: 6})]  # torchrun itself was killed
    assert find_failure(results).reason == ("OOM-killed: the kernel killed 1 process(es) at the node's memory limit"
                                            " after step 6; raise --memory-per-node or use less memory")
    results[1].steps_reached = {}  # no rank of it reported a step: nothing said of where
    assert "memory limit; raise" in find_failure(results).reason


def test_an_oom_kill_whose_rank_was_not_the_killed_one_or_is_unknown_names_no_killed_rank(nodes):
    node0, node1 = nodes()
    reason = ("OOM-killed: the kernel killed 1 process(es) at the node's memory limit; raise --memory-per-node or use"
              " less memory")
    # a helper process was killed (its DataLoader worker); the worker then raised on its own: its
    # error, where in the script, and what that error was raised from go with the OOM kill
    chain = ("caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.",)
    raised = [succeeded(node0), ended(node1, cause=RootCause(
        2, 0, 1, "RuntimeError: DataLoader worker (pid(s) 43) exited unexpectedly", users_frame="t.py:9 in main: x",
        chain=chain), oom_kills=1)]
    assert find_failure(raised) == Failure(
        "node1", 2, 1, "", lines_of(node1), users_frame="t.py:9 in main: x", chain=chain,
        reason="OOM-killed: the kernel killed 1 process(es) at the node's memory limit, and rank 2 failed:"
               " RuntimeError: DataLoader worker (pid(s) 43) exited unexpectedly; raise --memory-per-node or use"
               " less memory")
    # a rank of it that only lost its peers says nothing more
    lost = [succeeded(node0), ended(node1, cause=RootCause(2, 0, 1, LOST_PEER), oom_kills=1)]
    assert find_failure(lost) == Failure("node1", 2, 1, "", lines_of(node1), reason=reason)
    unknown = [succeeded(node0), ended(node1, code=137, oom_kills=1)]  # torchrun itself was killed: no report
    assert find_failure(unknown) == Failure("node1", None, 137, "", lines_of(node1), reason=reason)


# -- find_failure: a node that stopped answering, or that a fault was injected into


def test_a_node_that_stopped_answering_explains_the_failures_of_the_others(nodes):
    node0, node1 = nodes()
    results = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, "ValueError: an earlier error", timestamp=0.5)),
               ended(node1, NodePhase.STOPPED, 137, at=3.0, unresponsive="its container is paused")]
    assert find_failure(results) == Failure("node1", None, 137, "", lines_of(node1),
                                            reason="stopped answering: its container is paused")


def test_a_node_a_fault_was_injected_into_explains_the_run_unless_it_succeeded(nodes):
    node0, node1 = nodes()
    faulted = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, "ValueError: earlier", timestamp=0.5)),
               ended(node1, at=2.0, code=137, fault="kill:node1@t=5")]
    assert find_failure(faulted) == Failure("node1", None, 137, "", lines_of(node1),
                                            reason="failed (injected fault kill:node1@t=5)")
    both = [ended(node0, code=137, unresponsive="its container is paused", fault="pause:node0@t=1")]
    assert find_failure(both).reason == "stopped answering: its container is paused (injected fault pause:node0@t=1)"
    # the job got through the fault: the node that failed by itself is the one
    survived = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, "ValueError: its own")),
                succeeded(node1, fault="pause:node1@t=1..3")]
    assert find_failure(survived).describe() == "node0 rank 0 failed (exit code 1): ValueError: its own"


def test_under_a_fault_the_rank_it_aimed_at_is_named_or_else_the_rank_that_raised_with_its_error(nodes):
    node0, node1 = nodes()
    aimed = ended(node1, fault="hang-rank:3@t=1", culprit_rank=3, cause=RootCause(2, 0, 1, LOST_PEER))
    assert find_failure([succeeded(node0), aimed]) == Failure(
        "node1", 3, 1, "", lines_of(node1), reason="rank 3 failed (injected fault hang-rank:3@t=1)")
    raised = ended(node1, fault="disk-full:node1@t=1", cause=RootCause(2, 0, 1, "OSError: [Errno 28] No space left"))
    assert find_failure([succeeded(node0), raised]) == Failure(
        "node1", 2, 1, "", lines_of(node1),
        reason="rank 2 failed (injected fault disk-full:node1@t=1): OSError: [Errno 28] No space left")
    # what that error was raised from goes with it (torch.save's own error while handling the write's)
    wrapped = ended(node1, fault="disk-full:node1@t=1", cause=RootCause(2, 0, 1, "RuntimeError: file write failed",
                                                                       chain=("raised while handling: OSError: x",)))
    assert find_failure([succeeded(node0), wrapped]).chain == ("raised while handling: OSError: x",)
    aimed_chain = ended(node1, fault="hang-rank:3@t=1", culprit_rank=3,
                        cause=RootCause(2, 0, 1, LOST_PEER, chain=("caused by: OSError: y",)))
    assert find_failure([succeeded(node0), aimed_chain]).chain == ()  # another rank's, not the one aimed at
    silent = ended(node1, code=-9, fault="kill:node1@t=1", cause=RootCause(2, 0, -9, ""))  # no error to name
    assert find_failure([succeeded(node0), silent]) == Failure(
        "node1", None, -9, "", lines_of(node1), reason="failed (injected fault kill:node1@t=1)")


# -- find_failure: a death that ended the job for every node


def test_a_death_that_took_the_rendezvous_store_with_it_explains_the_run(nodes):
    node0, node1 = nodes()
    results = [ended(node0, code=137, at=2.0, consequence="died (its death); node0 held the store"),
               ended(node1, at=1.0, cause=RootCause(2, 0, 1, "torch.distributed.DistStoreError: timed out",
                                                    timestamp=0.5))]
    assert find_failure(results) == Failure("node0", None, 137, "", lines_of(node0),
                                            reason="died (its death); node0 held the store")


# -- find_failure: the earliest failure that is no consequence


def test_every_field_of_the_chosen_failure_comes_from_its_root_cause(nodes):
    node0, node1 = nodes()
    cause = RootCause(3, 1, -11, "", traceback="Traceback: in step", timestamp=2.0, crashed="in read at train.py:9")
    results = [succeeded(node0), ended(node1, code=1, cause=cause)]
    assert find_failure(results) == Failure("node1", 3, -11, "", lines_of(node1), traceback="Traceback: in step",
                                            crashed="in read at train.py:9")


def test_a_failure_without_a_root_cause_is_the_nodes_own_exit(nodes):
    node0, node1 = nodes()
    results = [succeeded(node0), ended(node1, code=1)]
    assert find_failure(results) == Failure("node1", None, 1, "", lines_of(node1))
    assert find_failure(results).describe() == "node1 failed (exit code 1)"
    # a root cause without an exit code of its own: the node's
    unreported = [succeeded(node0), ended(node1, code=1, cause=RootCause(2, 0, None, "ValueError: x"))]
    assert find_failure(unreported) == Failure("node1", 2, 1, "ValueError: x", lines_of(node1))


def test_the_earliest_error_by_the_workers_clocks_wins_over_the_node_that_ended_first(nodes):
    node0, node1, node2 = nodes(3)
    results = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, "ValueError: later", timestamp=20.0)),
               ended(node1, at=3.0, cause=RootCause(2, 0, 1, "ValueError: first", timestamp=10.0)),
               ended(node2, at=0.5, cause=RootCause(4, 0, 1, "ValueError: no error file"))]
    # an error with a time beats one without, whichever node ended first
    assert find_failure(results).exception == "ValueError: first"
    assert find_failure(results[::-1]).exception == "ValueError: first"


def test_nothing_failed_is_no_failure(nodes):
    node0, node1 = nodes()
    assert find_failure([succeeded(node0), succeeded(node1)]) is None
    assert find_failure([succeeded(node0), ended(node1, NodePhase.STOPPED, 143)]) is None


# -- left_early: ranks that finished while their peers still needed them


def test_a_lost_peer_is_not_blamed_on_finished_ranks_when_a_worker_crashed_by_itself(nodes):
    node0, node1 = nodes()
    # both lost a peer, but node1's rank aborted: a crash, not a rank that left
    results = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, LOST_PEER, timestamp=1.0)),
               ended(node1, at=2.0, cause=RootCause(2, 0, -6, "gloo::IoException: Connection reset by peer",
                                                    timestamp=2.0), finished_ranks={3: 4})]
    assert find_failure(results).describe() == f"node0 rank 0 failed (exit code 1): {LOST_PEER}"
    # a crash of a node that did not fail (the launcher stopped it) does not count
    stopped = [ended(node0, at=1.0, cause=RootCause(0, 0, 1, LOST_PEER)),
               ended(node1, NodePhase.STOPPED, -6, at=2.0, cause=RootCause(2, 0, -6, "SIGABRT"), finished_ranks={3: 4})]
    assert find_failure(stopped).describe() == (
        f"node0 rank 0 failed (exit code 1): {LOST_PEER}, as rank 3 (node1, after step 4) had finished its script"
        f" while ranks 0-2 still ran, and ranks 0-2's collectives lost it as a peer {UNEVEN}")


def test_ranks_that_all_reported_as_many_steps_are_asked_all_the_same_whether_they_run_the_same_number(nodes):
    """The optimizer's steps count the steps done: a rank that ran out of batches after step 5 and
    one waiting in its sixth step's backward pass reported 5 each (tests/jobs/uneven_batches.py
    under the hooked torchrun), so equal counts do not say the ranks ran as many steps. (A user
    trial's rank that skipped a barrier after step 4 is asked too: a review found the question
    dropped for uneven batches, where it was written for, when equal counts silenced it.)"""
    node0, node1 = nodes(per_node=1)
    lost = ended(node0, cause=RootCause(0, 0, 1, LOST_PEER), steps_reached={0: 5})
    finished = succeeded(node1, at=0.5, finished_ranks={1: 5}, steps_reached={1: 5})
    said = (f"node0 rank 0 failed (exit code 1): {LOST_PEER}, as rank 1 (node1, after step 5) had finished its script"
            " while rank 0 still ran, and rank 0's collectives lost it as a peer")
    assert find_failure([lost, finished]).describe() == f"{said} {UNEVEN}"
    fewer = ended(node0, cause=RootCause(0, 0, 1, LOST_PEER), steps_reached={0: 6})
    assert find_failure([fewer, finished]).describe() == f"{said} {UNEVEN}"


def test_each_ranks_steps_reached_are_its_latest_process_highest(tmp_path):
    from tests.unit.test_preemption import watch_with

    watch = watch_with(tmp_path,
                       {"rank": 0, "step": 1, "time": 100.0, "attempt": "a"},
                       {"rank": 0, "step": 3, "time": 101.0, "attempt": "a"},
                       {"rank": 0, "step": 2, "time": 102.0, "attempt": "a"},
                       {"rank": 1, "step": 7, "time": 100.0, "attempt": "b"},
                       {"rank": 1, "step": 1, "time": 110.0, "attempt": "c"},  # a restart, counting anew
                       {"rank": 2, "finished": True, "time": 100.0, "attempt": "d"})  # no step: left out
    assert watch.steps_reached() == {0: 3, 1: 1}


def test_a_lost_peer_with_no_rank_finished_or_a_killed_rank_is_said_as_it_is(nodes):
    node0, node1 = nodes()
    none_finished = [ended(node0, cause=RootCause(0, 0, 1, LOST_PEER)),
                     ended(node1, cause=RootCause(2, 0, 1, LOST_PEER))]
    assert find_failure(none_finished).describe() == f"node0 rank 0 failed (exit code 1): {LOST_PEER}"
    killed = [ended(node0, cause=RootCause(1, 1, -15, "Signal 15 (SIGTERM) received")),
              succeeded(node1, finished_ranks={2: 4, 3: 4})]
    assert find_failure(killed).describe() == "node0 rank 1 failed (exit code -15): Signal 15 (SIGTERM) received"


def test_ranks_that_finished_on_a_collective_whose_tensors_differed_are_not_asked_about_uneven_steps(nodes):
    """gloo matched rank 1's 12 elements with the others' 10: ranks 0 and 3 went on and finished,
    1 and 2 lost them. Where the records show that, the question about steps is not asked."""
    node0, node1 = nodes()
    results = [ended(node0, cause=RootCause(1, 1, 1, LOST_PEER), finished_ranks={0: None}),
               ended(node1, at=2.0, cause=RootCause(2, 0, 1, LOST_PEER), finished_ranks={3: None})]
    left = (f"node0 rank 1 failed (exit code 1): {LOST_PEER}, as ranks 0 (node0), 3 (node1) had finished their"
            " scripts while ranks 1, 2 still ran, and ranks 1, 2's collectives lost them as peers")
    assert find_failure(results).describe() == f"{left} {UNEVEN}"
    diverged = find_failure(results, diverged=True)
    assert diverged.describe() == left and diverged.peers_finished
    where = "collective #1: rank 1 entered all_reduce(float32[12]) at s.py:6; rank 2 entered all_reduce(float32[10])"
    assert diverged_hint(diverged, where) == (
        "  hint: the ranks made this collective with different tensors, or different collectives: gloo checks neither,"
        " so it may hand a rank wrong data with no error, and a rank fails only later (the ranks that finished did so"
        " on such data); --debug-collectives makes torch stop at the first mismatched collective, naming both")
    alone = Failure("node0", 1, 1, LOST_PEER, ())
    assert diverged_hint(alone, where).endswith("a rank fails only later; --debug-collectives makes torch stop at"
                                                " the first mismatched collective, naming both")
    # no records that part, or gloo's check or torch's caught it (their own words and hints say so)
    assert diverged_hint(alone, "") == ""
    assert diverged_hint(None, where) == ""
    assert diverged_hint(Failure("node0", 1, -6, MISMATCH, ()), where) == ""
    checked = "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: ..."
    assert diverged_hint(Failure("node0", 1, 1, checked, ()), where) == ""
    # torch refused one rank's own arguments at once: no difference gloo let by
    refused = ("RuntimeError: ProcessGroupGloo::allgather: invalid output tensor list at index 0 (expected length 2,"
               " got 3)")
    assert diverged_hint(Failure("node1", 1, 1, refused, ()), where) == (
        "  hint: torch refused this call's own arguments on the rank that made it, before any data moved (a gather's"
        " or all_gather's output list holds one tensor per rank of its group, on every rank): the error says which")


def test_a_monitored_barrier_that_names_who_did_not_reach_it_explains_the_peers_it_left(nodes):
    """Rank 2 never reached ``monitored_barrier``: rank 0's barrier names it, and rank 3's only lost
    rank 0, earlier by the clock. Rank 0's failure is the one that says who."""
    node0, node1 = nodes()
    named = "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 20000 ms"
    lost = ("RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting for"
            " send/recv from rank 0. Please check rank 0 logs for faulty rank.")
    results = [ended(node0, at=2.0, cause=RootCause(0, 0, 1, named)),
               ended(node1, at=1.0, cause=RootCause(3, 1, 1, lost), last_lines=["Connection closed by peer"])]
    failure = find_failure(results)
    assert failure.describe() == f"node0 rank 0 failed (exit code 1): {named}"
    assert absent_from_barrier_lines(failure, {2: "load_shard at train.py:5", 3: "monitored_barrier at t.py:9"}) == [
        "  rank 2 did not pass the barrier in time: it was in load_shard at train.py:5 when torchrun ended it"]
    assert absent_from_barrier_lines(failure, {}) == []  # no stacks of its: nothing to add
    several = replace(failure, exception="RuntimeError: [Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 5 ms")
    assert absent_from_barrier_lines(several, {1: "a at t.py:1", 2: "b at t.py:2"}) == [
        "  rank 1 did not pass the barrier in time: it was in a at t.py:1 when torchrun ended it",
        "  rank 2 did not pass the barrier in time: it was in b at t.py:2 when torchrun ended it"]
    # the named rank had finished its script (torch's check under --debug-collectives): said otherwise
    assert absent_from_barrier_lines(replace(failure, peers_finished=True), {2: "b at t.py:2"}) == []
    assert absent_from_barrier_lines(Failure("node0", 0, 1, LOST_PEER, ()), {2: "b at t.py:2"}) == []
    # a failure of its own still wins over both
    own = [results[0], ended(node1, at=3.0, cause=RootCause(3, 1, 1, "ValueError: bad shard"))]
    assert find_failure(own).exception == "ValueError: bad shard"


def test_the_peer_a_failure_lost_by_its_address_is_said_where_its_ranks_were_when_torchrun_ended_them(nodes):
    """Rank 1 destroyed its process group and went on with other work: rank 0's next collective
    lost it (gloo names it by its address only), and rank 1, ended by torchrun, failed of nothing
    of its own. Where rank 1 was is what explains it."""
    node0, node1 = nodes(per_node=1)
    closed = "RuntimeError: [../gloo/transport/tcp/pair.cc:547] Connection closed by peer [172.28.0.3]:36034"
    results = [ended(node0, cause=RootCause(0, 0, 1, closed)), ended(node1, state=NodePhase.STOPPED, code=143)]
    addresses = {"172.28.0.2": "node0", "172.28.0.3": "node1"}
    failure = find_failure(results)
    assert lost_peer_lines(failure, {1: "<module> at early_destroy.py:8", 0: "<module> at early_destroy.py:9"},
                           addresses, results) == [
        "  the peer it lost: rank 1 (node1) was in <module> at early_destroy.py:8 when torchrun ended it"]
    assert lost_peer_lines(failure, {}, addresses, results) == []  # no stacks of its
    assert lost_peer_lines(failure, {1: "f at t.py:1"}, {}, results) == []  # its address names no node
    assert lost_peer_lines(replace(failure, peers_finished=True), {1: "f at t.py:1"}, addresses, results) == []
    self_named = replace(failure, exception=closed.replace("172.28.0.3", "172.28.0.2"))
    assert lost_peer_lines(self_named, {0: "f at t.py:1"}, addresses, results) == []  # its own node is no lost peer


def test_a_node_whose_torchrun_lost_the_rendezvous_store_yields_to_an_error_of_its_own(nodes):
    """node0's torchrun failed with no worker to blame: its agent lost the store (node1 held it and
    restarted). That is a consequence, and node1's worker's own error explains the run."""
    node0, node1 = nodes()
    agent = ended(node0, at=1.0, last_lines=["torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The"
                                              " connection to the C10d store has failed."])
    own = ended(node1, at=2.0, cause=RootCause(2, 0, 1, "OSError: [Errno 22] Invalid argument"))
    assert find_failure([agent, own]).describe() == ("node1 rank 2 failed (exit code 1): OSError: [Errno 22] Invalid"
                                                     " argument")
    # a node with no worker to blame and no lost store still explains the run by itself
    alone = ended(node0, at=1.0)
    assert find_failure([alone, own]).describe() == "node0 failed (exit code 1)"
    # the earlier attempt's error of the node chosen comes with it
    earlier = EarlierFailure(2, 0, "OSError: [Errno 22] Invalid argument", ("OSError: [Errno 22] Invalid argument",))
    lost = ended(node1, at=2.0, cause=RootCause(2, 0, 1, "RuntimeError: Connection closed by peer"), earlier=earlier)
    assert find_failure([agent, lost]).earlier is None  # node0 ended first, and has none
    assert find_failure([ended(node0, at=3.0, last_lines=list(agent.last_lines)), lost]).earlier == earlier


def test_the_same_error_of_its_own_in_several_attempts_is_said_once_with_which(nodes):
    """torchrun restarted node1's workers twice (--max-restarts 2) on a bug: attempts 1 and 3
    failed by the same KeyError, attempt 2 only lost its peer."""
    node0, node1 = nodes()
    bug = "KeyError: 'momentum'"
    attempts = [AttemptError(1, 0, bug, True), AttemptError(2, 0, "RuntimeError: Connection closed by peer", False),
                AttemptError(3, 0, bug, True)]
    failed = ended(node1, at=1.0, cause=RootCause(1, 0, 1, bug))
    failed.attempts = attempts
    failure = find_failure([ended(node0, at=2.0, cause=RootCause(0, 0, 1, LOST_PEER)), failed])
    assert repeated_error_line(failure, [failed]) == (
        "  the same error ended attempts 1 and 3 of node1's workers: KeyError: 'momentum'; a restart runs the same"
        " script on the same files again, and does not get past an error of its own")
    failed.attempts = [*attempts, AttemptError(4, 1, bug, True)]
    assert "ended attempts 1, 3 and 4 of node1's" in repeated_error_line(failure, [failed])
    # once only, another error at last, or the same error only a lost peer's: nothing said
    for once in ([attempts[0]], [attempts[0], AttemptError(2, 0, "ValueError: other", True)],
                 [AttemptError(1, 0, LOST_PEER, False), AttemptError(2, 0, LOST_PEER, False)], []):
        failed.attempts = once
        assert repeated_error_line(failure, [failed]) == "", once
    failed.attempts = attempts
    # a review (session 116): any fault the node held was said to cause the script's own repeated error
    failed.fault = "slow:node1@t=1"
    assert repeated_error_line(failure, [failed]).endswith("does not get past an error of its own")
    failed.fault = "disk-full:node1,path=ckpt.*@step=5..8"  # a full disk, yet the error is the script's own
    assert repeated_error_line(failure, [failed]).endswith("does not get past an error of its own")
    full = "OSError: [Errno 28] No space left on device"  # every attempt's error was the full disk's
    failed.attempts = [AttemptError(1, 0, full, True), AttemptError(2, 0, full, True)]
    assert repeated_error_line(failure, [failed]) == (
        "  the same error ended attempts 1 and 2 of node1's workers: OSError: [Errno 28] No space left on device;"
        " injected fault disk-full:node1,path=ckpt.*@step=5..8 still held, and each attempt met it again")
    wrapped = "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0"  # torch.save's own
    failed.attempts = [AttemptError(a, 0, wrapped, True, last_lines=(full, "", wrapped)) for a in (1, 2)]
    assert repeated_error_line(failure, [failed]).endswith("still held, and each attempt met it again")
    failed.fault = "slow:node1@t=1"  # a slow holds no disk: an ENOSPC of the node's own disk is none of its doing
    assert repeated_error_line(failure, [failed]).endswith("does not get past an error of its own")
    failed.fault = "disk-full:node1,path=ckpt.*@step=5..8"
    torch_only = [AttemptError(a, 0, wrapped, True, last_lines=(wrapped,)) for a in (1, 2)]  # ENOSPC scrolled away
    failed.attempts = torch_only
    assert repeated_error_line(failure, [failed]).endswith("does not get past an error of its own")
    failed_write = [(failed.fault, "rank 0's write to ckpt.pt.tmp failed: no space left on device (ENOSPC), 2 times")]
    assert repeated_error_line(failure, [failed], failed_write).endswith("still held, and each attempt met it again")
    failed.attempts, failed.fault = attempts, ""
    assert repeated_error_line(None, [failed]) == ""
    assert repeated_error_line(replace(failure, node="node0"), [failed]) == ""  # the failing node's own attempts


def test_the_torn_save_hint_is_given_to_a_rank_that_failed_reading_after_a_torn_write_cut_a_file():
    torn = [("torn-write:node0@step=5", "ckpt/model.pt")]
    hint = ("  hint: torn-write:node0@step=5 cut ckpt/model.pt short, and a rank then failed reading a file: a save"
            " straight onto the file a job resumes from leaves no whole checkpoint when a crash cuts it; save to a"
            " temporary file beside it, then os.replace() it onto the name (a rename is atomic), so that the last whole"
            " one survives")
    load = '  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1491, in load'
    reading = Failure("node0", 0, 1, "OSError: [Errno 22] Invalid argument", ("Traceback:", load))
    assert torn_save_hint(reading, torn) == hint
    # its traceback from an error file, or an earlier attempt's lines, or the file's name in its error
    assert torn_save_hint(Failure("node0", 0, 1, "OSError: x", (), traceback=load), torn) == hint
    earlier = EarlierFailure(3, 0, "OSError: x", (load,))
    assert torn_save_hint(Failure("node0", 0, 1, "RuntimeError: connectFullMesh", (), earlier=earlier), torn) == hint
    named = Failure("node0", 0, 1, "UnpicklingError: invalid load key reading /workspace/ckpt/model.pt", ())
    assert torn_save_hint(named, torn) == hint
    # of two cut files, the one its error names
    two = [("torn-write:node0@step=5", "ckpt/model.pt"), ("torn-write:node0@step=9", "ckpt/optim.pt")]
    assert "torn-write:node0@step=5 cut ckpt/model.pt short" in torn_save_hint(named, two)
    # no torn write cut a file, a failure that read nothing, a save (torch.save's frames), or none
    assert torn_save_hint(reading, []) == ""
    assert torn_save_hint(Failure("node0", 0, 1, "ValueError: bad batch", ("Traceback:",)), torn) == ""
    saving = '  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 967, in save'
    assert torn_save_hint(Failure("node0", 0, 1, "OSError: [Errno 28]", (saving,)), torn) == ""
    assert torn_save_hint(None, torn) == ""
    # the node the torn write killed (no read failed, whatever its script printed of the file)
    killed = Failure("node0", 0, -9, "", ("saving ckpt/model.pt",), reason="failed (injected fault torn-write)")
    assert torn_save_hint(killed, torn) == ""
    assert torn_save_hint(Failure("node0", 0, 1, "ValueError: bad batch", ("saved ckpt/model.pt",)), torn) == ""


def test_the_interface_hint_names_the_nodes_own_interface_where_a_clusters_was_asked_for():
    gloo = ("RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr."
            " Unable to find address for: ib0")
    assert interface_hint(Failure("node0", 0, 1, gloo, ())) == (
        "  hint: the nodes have no network interface by the name GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME gives (ib0):"
        " each node has eth0, its link to the run's network, and lo, and the launcher sets both to eth0"
        " itself; leave a cluster's interface names (ib0, bond0) out of --env and --env-file here")
    nccl = "torch.distributed.DistBackendError: NCCL error: internal error - Bootstrap : no socket interface found"
    assert interface_hint(Failure("node0", 0, 1, nccl, ())).startswith(
        "  hint: the nodes have no network interface by the name GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME gives:")
    assert interface_hint(Failure("node0", 0, 1, "RuntimeError: Connection closed by peer", ())) == ""
    # the nodes' own interface gone (a fault's doing): no name to change
    assert interface_hint(Failure("node0", 0, 1, gloo.replace("ib0", "eth0"), ())) == ""
    assert interface_hint(None) == ""


# -- died_at_exit: a crash on the way out


def test_a_crash_at_exit_after_the_peers_finished_is_explained_word_for_word(nodes):
    node0, node1 = nodes()
    results = [succeeded(node0), ended(node1, code=1, cause=RootCause(3, 1, -6, "SIGABRT"))]
    failure = find_failure(results)
    said = ("node1 rank 3 died by SIGABRT after its peers finished: the job's work was done, and the worker process"
            " crashed while exiting.\n"
            "  cause: gloo's worker threads release tensors during Python's interpreter shutdown and abort (\"terminate"
            " called without an active exception\"); seen with every torch tried, 2.9 to 2.15{torch}.\n")
    on_the_default = ("  remedy: free the DDP model (del model; gc.collect()) before destroy_process_group(); the node"
                      " image's exit guard makes this rare (check that the run does not set DDP_EXIT_GUARD=0).")
    assert died_at_exit(failure, results) == said.format(torch="") + on_the_default
    # on the default image, its remedy is not that image
    on_2_9_1 = died_at_exit(failure, results, "2.9.1")
    assert on_2_9_1 == said.format(torch=" (this image has torch 2.9.1)") + on_the_default
    assert died_at_exit(failure, results, "2.14.1") == said.format(torch=" (this image has torch 2.14.1)") + (
        "  remedy: run on the default node image (torch 2.9.1, which aborted least, with its exit guard), or free the"
        " DDP model (del model; gc.collect()) before destroy_process_group().")
    # a peer stopped as the run ended, its ranks done and its torchrun waiting at its exit barrier, had finished too
    barrier = ended(node0, NodePhase.STOPPED, 137, grace_ran_out=True, returned_ranks=tuple(node0.global_ranks),
                    still_running=("torchrun --nnodes 2",))
    returned = ended(node1, code=1, cause=RootCause(3, 1, -6, "SIGABRT"), returned_ranks=(3,))  # its script returned
    assert died_at_exit(failure, [barrier, returned]) == said.format(torch="") + on_the_default
    finished = ended(node0, NodePhase.STOPPED, 143, finished_ranks={r: 20 for r in node0.global_ranks})
    assert died_at_exit(failure, [finished, returned]) is not None
    # ... but a rank that died before its own script returned (rank-only work after the peers' last collective)
    # did not crash on its way out: its peers waiting at their barrier say nothing of it
    assert died_at_exit(failure, [barrier, results[1]]) is None
    # ... not one whose ranks still ran, or one of whose ranks had not returned
    working = ended(node0, NodePhase.STOPPED, 137, grace_ran_out=True, returned_ranks=(),
                    still_running=("torchrun --nnodes 2", "python3 train.py"))
    assert died_at_exit(failure, [working, returned]) is None
    assert died_at_exit(failure, [ended(node0, NodePhase.STOPPED, 143), returned]) is None
    # aborted in the script's own thread and code (its atexit handler's os.abort): not gloo's threads
    stack = "; every thread's stack: /runs in x/debug/rank3.crash"  # (a path holding " in " is no place in the code)
    own = replace(failure, crashed="Aborted in <lambda> at abort_at_exit.py:17" + stack)
    assert "cause: gloo's" in died_at_exit(replace(failure, crashed="Aborted" + stack), results, "2.9.1")
    assert died_at_exit(own, results, "2.9.1").splitlines()[1:] == [
        "  it crashed in the script's own thread, where the crash dump says (above): look there, and at the native"
        " extensions or atexit handlers it calls."]
    native = replace(failure, crashed="Aborted in a native thread, while the script was in <module> at train.py:40")
    assert "  cause: gloo's worker threads" in died_at_exit(native, results, "2.9.1")
    # a SIGTERM is sent by someone: no crash
    assert died_at_exit(Failure("node1", 3, -15, "", ()), results) == (
        "node1 rank 3 was ended by SIGTERM after its peers finished: the job's work was done; a process sent it (the"
        " script itself, a library's own timeout, or another process in the node).")
    segv = Failure("node1", None, -11, "", ())
    assert died_at_exit(segv, results) == (
        "node1 died by SIGSEGV after its peers finished: the job's work was done, and the worker process crashed while"
        " exiting.\n  look for native extensions or atexit handlers that outlive destroy_process_group().")
    unnamed = Failure("node1", 3, -40, "", ())
    assert died_at_exit(unnamed, results).startswith("node1 rank 3 died by signal 40 after its peers finished:")


def test_only_a_death_by_signal_with_no_reason_after_every_peer_succeeded_is_a_crash_at_exit(nodes):
    node0, node1 = nodes()
    results = [succeeded(node0), ended(node1, code=1, cause=RootCause(3, 1, -6, "SIGABRT"))]
    assert died_at_exit(None, results) is None
    assert died_at_exit(Failure("node1", 3, -9, "", (), reason="OOM-killed: ..."), results) is None
    assert died_at_exit(Failure("node1", 3, 0, "", ()), results) is None
    assert died_at_exit(Failure("node1", 3, 1, "", ()), results) is None
    assert died_at_exit(Failure("node1", 3, None, "", ()), results) is None
    peer_failed = [ended(node0, cause=RootCause(0, 0, 1, "ValueError: x")), results[1]]
    assert died_at_exit(Failure("node1", 3, -6, "", ()), peer_failed) is None
    assert died_at_exit(Failure("node1", 3, -6, "", ()), [results[1]]) is None  # no peers at all
    lost = ended(node0, NodePhase.LOST, 137, lost="lose:node0@t=5")  # a node lost for good is no peer that finished
    assert died_at_exit(Failure("node1", 3, -6, "", ()), [lost, results[1]]) is None
    assert died_at_exit(Failure("node1", 3, -6, "", ()), [succeeded(node0), lost, results[1]]) is not None
    # an abort on an error the rank met, in a collective, is no crash on its way out
    gloo = Failure("node1", 3, -6, "gloo::EnforceNotMet: [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes."
                   " 22 vs 20. Received data size doesn't match expected size. Is there a distributed collective"
                   " mismatch in your code?", ())
    assert died_at_exit(gloo, results) is None
    assert mismatch_hint(gloo).startswith("  hint: gloo received more data than expected")
    assert "pad to the largest" not in mismatch_hint(gloo)
    in_gather = replace(gloo, crashed="Aborted in a native thread, while the script was in all_gather at eval.py:9")
    assert mismatch_hint(in_gather).endswith("; all_gather takes a tensor of one size from every rank: where ranks"
                                             " hold different counts (predictions, tokens), gather the sizes first"
                                             " and pad to the largest, or use all_gather_object")


# -- the hints


def test_the_mismatch_hint_is_given_for_gloos_size_check_alone():
    aborted = Failure("node0", 0, -6, MISMATCH, ())
    assert mismatch_hint(aborted) == (
        "  hint: gloo received more data than expected: the ranks called different collectives, or one with different"
        " sizes, or a receive is smaller than its send; --debug-collectives makes torch stop at the first mismatched"
        " collective, naming both (it does not compare sends and receives)")
    assert mismatch_hint(Failure("node0", 0, 1, LOST_PEER, ())) == ""
    assert mismatch_hint(Failure("node0", 0, 1, "", ())) == ""
    assert mismatch_hint(None) == ""


def test_the_mismatch_hint_says_the_ranks_took_different_steps_where_one_was_in_a_ddp_step():
    """Rank 0 had one batch more: its 11th backward pass all-reduced the gradients (10 floats)
    while the others all-reduced a metric after their loop (1 float), and gloo aborted rank 3.
    Before, the hint was the general one alone."""
    from orchestrate.hangs.collectives import UNEVEN_HINT

    aborted = Failure("node1", 3, -6, MISMATCH, ())
    where = ("rank 3 aborted in all_reduce at uneven.py:21; rank 0 was in all_reduce(gradients of DDP(Linear)) #13"
             " at uneven.py:18; rank 1 was in all_reduce(float32[1]) #13 at uneven.py:21; rank 2 was in"
             " all_reduce(float32[1]) #13 at uneven.py:21")
    assert mismatch_hint(aborted, where) == (
        f"{mismatch_hint(aborted)}; here rank 0 was in a DDP model's training step while the others made another"
        f" collective: {UNEVEN_HINT}")
    # no rank in a step: the general hint alone
    assert mismatch_hint(aborted, where.replace("gradients of DDP(Linear)", "float32[10]")) == mismatch_hint(aborted)
    # the rank aborted at the step's line (its own place has no tensors) is in the step too
    at_step = where.replace("aborted in all_reduce at uneven.py:21", "aborted in all_reduce at uneven.py:18")
    assert mismatch_hint(aborted, at_step).startswith(f"{mismatch_hint(aborted)}; here ranks 0, 3 were in")
    every = at_step.replace("all_reduce(float32[1])", "all_reduce(gradients of DDP(Linear))").replace(".py:21", ".py:18")
    assert mismatch_hint(aborted, every) == mismatch_hint(aborted)


def test_the_mismatch_hint_names_the_dtype_size_or_list_length_that_gloos_byte_counts_and_a_peers_record_show():
    """u12 and u04 of session 114's trial: rank 0's loss sum is float32, rank 1's sum([]) an int64
    tensor, and gloo aborts rank 0 on "8 vs 4"; rank 0 broadcasts a list of 3 objects to a list of
    2 slots on rank 1, aborted on the lists' sizes, "24 vs 16". Where one peer's record moved
    exactly the bytes that came, the hint says what differs."""
    def aborted(rank: int, sent: int, expected: int) -> Failure:
        return Failure(f"node{rank}", rank, -6, f"gloo::EnforceNotMet: [enforce fail at pair.cc:456]"
                       f" op.preamble.length <= op.nbytes. {sent} vs {expected}. Received data size doesn't match"
                       " expected size. Is there a distributed collective mismatch in your code?", ())

    general = mismatch_hint(aborted(0, 8, 4))
    dtype = "rank 0 aborted in all_reduce at sum.py:8; rank 1 was in all_reduce(int64[]) #1 at sum.py:8"
    assert mismatch_hint(aborted(0, 8, 4), dtype) == (
        f"{general}; here rank 1 sent int64[] (8 bytes) where rank 0 expected 4, as 1 element of 4 bytes (float32,"
        " int32): a dtype that differs, e.g. a tensor built from a Python int on one rank (torch.tensor(0), or"
        " torch.tensor(sum([])) of an empty list, is int64) and from a float on another (float32): give the tensor"
        " its dtype (dtype=torch.float32)")
    # the same dtype, fewer elements on the aborted rank
    size = "rank 0 aborted in broadcast at b.py:5; rank 1 was in broadcast(float32[8] from rank 1) #3 at b.py:5"
    assert mismatch_hint(aborted(0, 32, 16), size) == (
        f"{general}; here rank 1 sent float32[8] (32 bytes) where rank 0 expected 16, as 8 elements of 2 bytes (float16,"
        " bfloat16, int16) or 4 elements of float32: a dtype or a size that differs")
    odd = size.replace("float32[8]", "float32[3]")  # 12 bytes came; 8 expected is no whole element count of 3
    assert mismatch_hint(aborted(0, 12, 8), odd) == (
        f"{general}; here rank 1 sent float32[3] (12 bytes) where rank 0 expected 8, as 2 elements of float32: a size"
        " that differs")
    # the peer's record moved other bytes than came (a chunk of a larger all_reduce): nothing said
    assert mismatch_hint(aborted(0, 24, 16), size) == general
    objects = ("rank 1 aborted in broadcast_object_list at objs.py:10; rank 0 was in broadcast_object_list(3 objects"
               " from rank 0) #1 at objs.py:10")
    assert mismatch_hint(aborted(1, 24, 16), objects) == (
        f"{general}; here rank 0 broadcast a list of 3 objects where rank 1 passed 2 slots (gloo's 24 vs 16 bytes"
        " are their sizes, 8 bytes each): broadcast_object_list takes a list of the same length on every rank")
    # (a review's points) a peer in another collective: gloo paired two calls, and no dtype is to blame
    other_op = "rank 0 aborted in all_reduce at a.py:8; rank 1 was in broadcast(int64[] from rank 1) #5 at a.py:20"
    assert mismatch_hint(aborted(0, 8, 4), other_op) == general
    # a receiver with 3 slots is no broadcaster: the root (rank 2) is the one whose list was sent
    receiver = ("rank 0 aborted in broadcast_object_list at objs.py:10; rank 1 was in broadcast_object_list(3 objects"
                " from rank 2) #1 at objs.py:10")
    assert mismatch_hint(aborted(0, 24, 16), receiver) == general


def test_the_missing_module_hint_names_the_module_and_both_places_the_nodes_look():
    missing = Failure("node0", 0, 1, "ModuleNotFoundError: No module named 'einops'", ())
    assert missing_module_hint(missing) == (
        "  hint: the nodes have no module 'einops': a package (at the version your script needs) goes into the node"
        " image by --requirements FILE (pip requirements) or a --dockerfile; a module of your own must be importable"
        " from --workdir, which every node mounts as /workspace")
    dotted = Failure("node1", 1, 1, "ModuleNotFoundError: No module named 'mypkg.data'", ())
    assert "no module 'mypkg.data':" in missing_module_hint(dotted)
    # an import that found the module but not a name in it is the script's own business
    assert missing_module_hint(Failure("node0", 0, 1, "ImportError: cannot import name 'x' from 'os'", ())) == ""
    assert missing_module_hint(Failure("node0", 0, 1, "ValueError: No module named 'x'", ())) == ""
    assert missing_module_hint(Failure("node0", 0, 1, "", ())) == ""
    # an import that failed under the script's own error: the chain names the module
    wrapped = Failure("node0", 0, 1, "RuntimeError: optional backend unavailable", (),
                      chain=("caused by: ModuleNotFoundError: No module named 'apex'",))
    assert "no module 'apex':" in missing_module_hint(wrapped)
    # an optional import the script caught, and another error raised while handling it: not the module's
    caught = replace(wrapped, chain=("raised while handling: ModuleNotFoundError: No module named 'apex'",))
    assert missing_module_hint(caught) == ""
    # a failure with no exception of its own (a fault's, an OOM kill's) gives its chain to no hint
    assert missing_module_hint(replace(wrapped, exception="", reason="failed (injected fault kill:node0)")) == ""
    assert missing_module_hint(None) == ""


def test_a_script_in_a_subdirectory_that_imports_its_own_package_is_told_to_run_as_a_module():
    """Seen in a user trial: `run -- mytrain/train.py`, whose `import mytrain.helpers` failed
    although mytrain/ is in the work directory: Python searches /workspace/mytrain, not /workspace."""
    traceback = ('Traceback (most recent call last):\n  File "/workspace/mytrain/train.py", line 9, in <module>\n'
                 "    from mytrain.helpers import load_config, rank_info\nModuleNotFoundError: No module named"
                 " 'mytrain'")
    own = Failure("node0", 0, 1, "ModuleNotFoundError: No module named 'mytrain'", (), traceback=traceback)
    assert missing_module_hint(own) == (
        "  hint: 'mytrain' is your work directory's own package, but mytrain/train.py runs with its own directory"
        " (/workspace/mytrain) first on its import path, not /workspace: run it as a module of its package,"
        " -- -m mytrain.train")
    deeper = replace(own, traceback=traceback.replace("mytrain/train.py", "mytrain/jobs/train.py"))
    assert missing_module_hint(deeper).endswith("-- -m mytrain.jobs.train")
    # from the node's last lines where the traceback was not kept apart
    assert "-- -m mytrain.train" in missing_module_hint(replace(own, traceback="", last_lines=tuple(
        traceback.splitlines())))
    # another package, or a script at the top of the work directory: the general hint
    other = replace(own, exception="ModuleNotFoundError: No module named 'einops'")
    assert missing_module_hint(other).startswith("  hint: the nodes have no module 'einops': a package")
    top = replace(own, traceback=traceback.replace("mytrain/train.py", "train.py"))
    assert missing_module_hint(top).startswith("  hint: the nodes have no module 'mytrain': a package")
    # run as -m mytrain.train already, a submodule missing: Python names the submodule, and -m is no cure
    submodule = replace(own, exception="ModuleNotFoundError: No module named 'mytrain.helpers'",
                        traceback=traceback.replace("'mytrain'", "'mytrain.helpers'"))
    assert missing_module_hint(submodule).startswith("  hint: the nodes have no module 'mytrain.helpers': a package")


def test_the_made_alone_hint_is_given_to_a_rank_left_alone_in_a_forward_pass_broadcasting_its_buffers(nodes):
    """Rank 0 evaluated its DDP model alone, and rank 1 finished meanwhile: the forward pass's
    buffer broadcast lost its peer (gloo), or torch's check of it found rank 1 gone."""
    node0, node1 = nodes(2, 1)
    forward = ("  File \"/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py\", line 2190,"
               " in _sync_buffers", "    self._sync_module_buffers(authoritative_rank)")
    hint = ("  hint: a DDP model's forward pass broadcasts the model's buffers from rank 0 (broadcast_buffers=True, the"
            " default; BatchNorm's running statistics are buffers), so it is a collective every rank must make: a"
            " forward pass only some ranks make (an evaluation on rank 0 alone, a step the others do not take) waits"
            " for the others; evaluate through model.module where one rank does, or on every rank")
    checked = "RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 1800000 ms"
    for exception in (LOST_PEER, checked):
        results = [ended(node0, cause=RootCause(0, 0, 1, exception), last_lines=list(forward)),
                   succeeded(node1, finished_ranks={1: 15})]
        failure = find_failure(results)
        assert failure.describe().endswith(", as rank 1 (node1, after step 15) had finished its script while rank 0"
                                           f" still ran, and rank 0's collectives lost it as a peer {UNEVEN}")
        assert made_alone_hint(failure) == hint
    # the error file's traceback shows the forward pass as well as the last lines
    left = Failure("node0", 0, 1, LOST_PEER, (), traceback="\n".join(forward), description="... had finished ...",
                   peers_finished=True)
    assert made_alone_hint(left) == hint
    # a timeout (every rank may be in that forward pass: the hang diagnosis reads their records), a
    # fault's failure, a lost peer nobody left early, a forward pass elsewhere, or no failure: none
    timed_out = Failure("node0", 0, 1, "RuntimeError: [../gloo/transport/tcp/pair.cc] Timed out waiting 1800000ms",
                        forward)
    assert made_alone_hint(timed_out) == ""
    assert made_alone_hint(Failure("node1", 1, -9, "", forward, reason="rank 1 failed (injected fault)")) == ""
    assert made_alone_hint(Failure("node0", 0, 1, LOST_PEER, forward)) == ""
    elsewhere = ("  File \"train.py\", line 3, in main",)
    assert made_alone_hint(Failure("node0", 0, 1, LOST_PEER, elsewhere, description="... had finished ...",
                                   peers_finished=True)) == ""
    assert made_alone_hint(None) == ""


def test_the_uneven_hint_is_given_to_a_rank_left_alone_in_a_ddp_training_step(nodes):
    """Rank 1's share of the data was larger: rank 0 finished after 30 steps, and rank 1's next
    step lost its peer, in the backward pass (or a forward pass, where it is known to be a step's:
    its record says which). Not for a collective of no training step, nor a rank no one left."""
    from orchestrate.hangs.collectives import UNEVEN_HINT

    node0, node1 = nodes(2, 1)
    for collective, kind in (("all_reduce(gradients of DDP(Net))", "backward pass"),
                             ("broadcast(buffers of DDP(Net))", "forward pass")):
        cause = RootCause(1, 0, 1, LOST_PEER, collective=collective, training_pass=kind)
        failure = find_failure([succeeded(node0, finished_ranks={0: 30}), ended(node1, cause=cause)])
        assert (failure.collective, failure.training_pass) == (collective, kind)
        assert failure.describe().endswith(f"rank 1's collectives lost it as a peer {UNEVEN}")
        assert uneven_hint(failure) == f"  hint: {UNEVEN_HINT}"
        # the same words where the rendezvous store was lost: its description is not finished peers'
        assert uneven_hint(replace(failure, peers_finished=False)) == ""
    evaluation = RootCause(1, 0, 1, LOST_PEER, collective="broadcast(buffers of DDP(Net))")
    assert uneven_hint(find_failure([succeeded(node0, finished_ranks={0: 30}), ended(node1, cause=evaluation)])) == ""
    nobody_left = RootCause(1, 0, 1, LOST_PEER, collective="all_reduce(gradients of DDP(Net))",
                            training_pass="backward pass")
    assert uneven_hint(find_failure([ended(node0, NodePhase.STOPPED, 143), ended(node1, cause=nobody_left)])) == ""
    assert uneven_hint(None) == ""


def test_the_fsdp_forward_hint_is_given_to_a_rank_left_alone_gathering_an_fsdp_models_parameters(nodes):
    """Rank 0 evaluated its FSDP model alone, and rank 1 finished meanwhile: the last lines show
    the all-gather FSDP called, or FSDP's gathering function itself."""
    node0, node1 = nodes(2, 1)
    site = "/opt/venv/lib/python3.11/site-packages/torch/distributed"
    gathering = (f'  File "{site}/fsdp/_fully_shard/_fsdp_collectives.py", line 89, in __call__',
                 "    return dist.all_gather_into_tensor(",
                 f'  File "{site}/distributed_c10d.py", line 4056, in all_gather_into_tensor', "    work.wait()")
    results = [ended(node0, cause=RootCause(0, 0, 1, LOST_PEER), last_lines=list(gathering)),
               succeeded(node1, finished_ranks={1: 10})]
    hint = made_alone_hint(find_failure(results))
    assert hint.startswith("  hint: an FSDP model's forward pass gathers each sharded module's parameters from every"
                           " rank, so it is a collective every rank must make")
    fsdp1 = Failure("node0", 0, 1, LOST_PEER, ("  File \"x.py\", line 3, in _all_gather_flat_param",),
                    description="... had finished ...", peers_finished=True)
    assert made_alone_hint(fsdp1) == hint
    # the user's own all-gather, outside FSDP: none
    own = (f'  File "{site}/distributed_c10d.py", line 4056, in all_gather_into_tensor',)
    assert made_alone_hint(Failure("node0", 0, 1, LOST_PEER, own, description="... had finished ...",
                                   peers_finished=True)) == ""


def test_a_rank_left_alone_in_a_checkpoint_save_is_told_by_its_record_where_its_last_lines_do_not_reach():
    """Rank 0 saved alone with dcp.save at the end, and rank 1 finished: DCP's frames are deeper
    than the last lines kept, and the collective its record says failed tells it."""
    own = ('  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3949,'
           " in all_gather",)
    saving = Failure("node0", 0, 1, LOST_PEER, own, description="... had finished ...", peers_finished=True,
                     collective="gather_object(in dcp.save)")
    assert made_alone_hint(saving).startswith("  hint: torch.distributed.checkpoint's save and load are collectives:"
                                              " every rank calls them")
    gathering = replace(saving, collective="all_gather_into_tensor(parameters of FSDP(Linear))")
    assert made_alone_hint(gathering).startswith("  hint: an FSDP model's forward pass gathers")
    # the user's own gather_object, or no peer that finished: none
    assert made_alone_hint(replace(saving, collective="gather_object()")) == ""
    # DCP's frames in the traceback say it too, those of its save or load only (not get_state_dict's)
    dcp = "/opt/venv/lib/python3.11/site-packages/torch/distributed/checkpoint"
    saved = (f'  File "{dcp}/state_dict_saver.py", line 193, in save', *own)
    assert made_alone_hint(replace(saving, collective="", last_lines=saved)) == made_alone_hint(saving)
    helper = (f'  File "{dcp}/state_dict.py", line 900, in get_model_state_dict', *own)
    assert made_alone_hint(replace(saving, collective="", last_lines=helper)) == ""
    assert made_alone_hint(replace(saving, description="", peers_finished=False)) == ""
    # a lost rendezvous store's failure has a description too, and no finished peer
    assert made_alone_hint(replace(saving, description="the store ...", peers_finished=False)) == ""


def test_the_compiler_hint_is_given_where_torch_compile_found_no_compiler_in_the_node():
    hint = ("  hint: torch.compile builds a compiled model's kernels with a C++ compiler in the nodes: the default node"
            " image has g++ and Python's headers; an --image or --dockerfile of your own needs them too (apt-get install"
            " g++ python3-dev), or set CXX and CC to the compilers it has")
    inductor = ("torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in"
                " torch._inductor.config.cpp.cxx: (None, 'g++')")
    triton = "torch._inductor.exc.InductorError: RuntimeError: Failed to find C compiler. Please specify via CC"
    headers = ("torch._inductor.exc.InductorError: CppCompileError: C++ compile error ... fatal error: Python.h: No such"
               " file or directory")
    for exception in (inductor, triton, headers):
        assert compiler_hint(Failure("node0", 0, 1, exception, ())) == hint
    assert compiler_hint(Failure("node0", 0, 1, "torch._inductor.exc.InductorError: LoweringException", ())) == ""
    assert compiler_hint(None) == ""


def test_an_input_that_met_the_end_of_a_workers_stdin_gets_the_no_terminal_hint():
    """A trial's rank 0 asked `input("continue? ")`: it failed at once with EOFError, and nothing
    said that a torchrun worker has no terminal (until 2026-12-07)."""
    said = no_terminal_hint(Failure("node0", 0, 1, "EOFError: EOF when reading a line", ()))
    assert said.startswith("  hint: a torchrun worker has no terminal: its standard input is empty, so input() meets"
                           " its end at once; give the answer as an argument of the script, in the environment (--env")
    assert no_terminal_hint(Failure("node0", 0, 1, "EOFError: Ran out of input", ())) == ""  # a pickle's, not input()'s
    assert no_terminal_hint(None) == ""
    # an EOFError the script handled (``except EOFError: torch.load(...)``) is not what failed
    handled = Failure("node0", 0, 1, "RuntimeError: PytorchStreamReader failed reading zip archive", (),
                      chain=("raised while handling: EOFError: EOF when reading a line",))
    assert no_terminal_hint(handled) == ""
    assert no_terminal_hint(replace(handled, chain=("caused by: EOFError: EOF when reading a line",))) != ""


def test_the_no_gpu_hint_is_given_on_a_node_without_a_gpu_to_a_script_that_asked_for_one(nodes):
    (alone,) = nodes(1, 1)
    results = [ended(alone)]
    nccl = Failure("node0", 0, 1, "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", ())
    assert no_gpu_hint(nccl, results) == (
        "  hint: these nodes have no GPU, and the script asks for NCCL: --nccl-as-gloo gives it gloo wherever it asks"
        " for nccl; what it puts on CUDA still needs a GPU")
    cuda = Failure("node0", 0, 1, "AssertionError: Torch not compiled with CUDA enabled", ())
    assert no_gpu_hint(cuda, results) == (
        "  hint: the nodes' torch is built without CUDA, and the script puts tensors on CUDA: use an image whose torch"
        " has CUDA, or let the script pick its device by torch.cuda.is_available()")
    assert no_gpu_hint(Failure("node0", 0, 1, "ValueError: x", ()), results) == ""  # the script's own error
    assert no_gpu_hint(Failure("node0", 0, 1, "", ()), results) == ""
    assert no_gpu_hint(None, results) == ""
    assert no_gpu_hint(replace_node(nccl, "node7"), results) == ""  # a node the results do not have


def test_the_no_gpu_hint_is_not_given_on_nodes_with_gpus(nodes):
    (node0, node1) = nodes(2, 1, gpus_per_node=1, backend="nccl")
    results = [ended(node0), succeeded(node1)]
    assert no_gpu_hint(Failure("node0", 0, 1, "RuntimeError: No CUDA GPUs are available", ()), results) == ""


def test_a_gpu_beyond_the_nodes_own_gets_the_hint_to_pick_it_by_local_rank(nodes):
    """A script that picks its GPU by RANK ran on one machine; on the second node rank 1 asks for
    cuda:1 of a node with one GPU."""
    node0, node1 = nodes(2, 1, gpus_per_node=1, backend="nccl")
    results = [succeeded(node0), ended(node1)]
    ordinal = Failure("node1", 1, 1, "torch.AcceleratorError: CUDA error: invalid device ordinal", ())
    assert device_ordinal_hint(ordinal, results) == (
        "  hint: node1 has 1 GPU (cuda:0), and rank 1 (local rank 0) asked for another: pick the GPU by LOCAL_RANK"
        " (torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))), not RANK; each node numbers its own GPUs from 0,"
        " so a script that ran on one machine fails on the other nodes")
    (wide, other) = nodes(2, 2, gpus_per_node=2, backend="nccl")
    assert "node1 has 2 GPUs (cuda:0 to cuda:1), and rank 3 (local rank 1) asked for another: pick the GPU by" \
           " LOCAL_RANK" in device_ordinal_hint(Failure("node1", 3, 1, "RuntimeError: CUDA error: invalid device"
                                                        " ordinal", ()), [succeeded(wide), ended(other)])
    # more ranks than GPUs on the node (--share-gpus): LOCAL_RANK alone does not do either
    (shared,) = nodes(1, 2, gpus_per_node=1, backend="nccl", share_gpus=True)
    assert device_ordinal_hint(Failure("node0", 1, 1, "CUDA error: invalid device ordinal", ()), [ended(shared)]) == (
        "  hint: node0 has 1 GPU (cuda:0) for its 2 ranks, and rank 1 (local rank 1) asked for another: pick the GPU"
        " as LOCAL_RANK % torch.cuda.device_count()")
    assert device_ordinal_hint(Failure("node1", None, 1, "CUDA error: invalid device ordinal", ()), results) == ""
    # on nodes without GPUs, the no-GPU hint's business; another error, or no failure: none
    (cpu,) = nodes(1, 1)
    assert device_ordinal_hint(replace_node(ordinal, "node0"), [ended(cpu)]) == ""
    assert device_ordinal_hint(Failure("node1", 1, 1, "RuntimeError: CUDA out of memory", ()), results) == ""
    assert device_ordinal_hint(None, results) == ""


def replace_node(failure: Failure, node: str) -> Failure:
    from dataclasses import replace

    return replace(failure, node=node)


def test_a_hint_reads_the_exceptions_the_failure_was_raised_from_as_it_reads_the_failures_own(nodes):
    """A script that wraps what went wrong in its own error (``raise RuntimeError("setup failed")
    from e``) gets the hint the wrapped error would have."""
    (alone,) = nodes(1, 1)
    results = [ended(alone)]
    nccl = "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"
    compiler = ("torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in"
                " torch._inductor.config.cpp.cxx: (None, 'g++')")
    interface = ("RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa !="
                 " nullptr. Unable to find address for: ib0")
    for hint, error in ((lambda f: no_gpu_hint(f, results), nccl), (compiler_hint, compiler),
                        (interface_hint, interface), (mismatch_hint, MISMATCH)):
        own = hint(Failure("node0", 0, 1, error, ()))
        for how in ("caused by", "raised while handling"):
            wrapped = Failure("node0", 0, 1, "RuntimeError: setup failed", (), chain=(f"{how}: {error}",))
            assert hint(wrapped) == own != "", error
        assert hint(Failure("node0", 0, 1, "RuntimeError: setup failed", ())) == ""
        # a failure with no exception of its own (a fault's: its reason says it) gives its chain to no hint
        faulted = Failure("node0", 0, 1, "", (), reason="failed (injected fault disconnect:node0)",
                          chain=(f"caused by: {error}",))
        assert hint(faulted) == ""


def test_a_run_that_had_torchs_check_is_never_told_to_rerun_with_it(nodes, tmp_path, monkeypatch):
    """Session 115 (h2): gloo's size abort and a difference gloo let by both said "--debug-collectives
    makes torch stop at the first mismatched collective" to a run that had it: its check had let
    the calls by, so it points at the ranks' collective records instead."""
    import json

    from orchestrate.hangs.diagnosis import place_failure
    from orchestrate.node.collective_log import CollectiveLog
    from orchestrate.node.snapshot import REQUEST_FILE, SnapshotWriter
    from orchestrate.outcome.judge import CHECK_HAD
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.summary import format_summary

    option = "--debug-collectives makes torch"
    aborted = Failure("node0", 0, -6, MISMATCH, ())
    where = "rank 0 aborted in recv at p2p.py:9; rank 1 was in send(float32[8]) #3 at p2p.py:7"
    for divergence, records in ((where, "the line above, from the collective records the ranks wrote"),
                                ("", "debug/rank<N>.json in the run's directory")):
        said = mismatch_hint(aborted, divergence, checked=True)
        assert option not in said and CHECK_HAD in said and records in said, said
        assert "not sends and receives" in said
        assert option in mismatch_hint(aborted, divergence)
    lost = Failure("node0", 1, 1, LOST_PEER, ())
    parted = ("collective #1: rank 1 entered all_reduce(float32[4]) at s.py:6; rank 2 entered all_reduce(float32[4])"
              " at s.py:9")
    assert diverged_hint(lost, parted, checked=True) == (
        "  hint: the ranks made this collective with different tensors, or different collectives: gloo checks neither,"
        f" so it may hand a rank wrong data with no error, and a rank fails only later; {CHECK_HAD}; the line above,"
        " from the collective records the ranks wrote, says where each was")
    # the summary says it of a run whose result says it had the check
    node0, node1 = nodes()
    results = [ended(node0, code=-6, cause=RootCause(0, 0, -6, MISMATCH)), ended(node1, state=NodePhase.STOPPED)]
    checked_run = RunResult("r", tmp_path, results, Timings(), divergence=where, collectives_checked=True)
    assert CHECK_HAD in format_summary(checked_run) and option not in format_summary(checked_run)
    assert option in format_summary(replace(checked_run, collectives_checked=False))
    # the ranks' records of the attempt say whether they ran under the check
    writer = SnapshotWriter(str(tmp_path), 0, CollectiveLog())
    for level, expected in (("DETAIL", True), ("INFO", False)):
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", level)
        (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": level}))
        writer.answer_pending()
        assert place_failure(aborted, tmp_path, {0}, attempt_began=0.0).collectives_checked is expected
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": "again"}))
    writer.answer_pending()
    assert not place_failure(aborted, tmp_path, {0}, attempt_began=4e9).collectives_checked  # an earlier attempt's


def test_a_node_plan_says_whether_its_workers_run_torchs_check(make_job):
    assert make_job(nodes=1, debug_collectives=True).nodes[0].checks_collectives
    assert make_job(nodes=1, user_env={"TORCH_DISTRIBUTED_DEBUG": "detail"}).nodes[0].checks_collectives
    assert not make_job(nodes=1, user_env={"TORCH_DISTRIBUTED_DEBUG": "INFO"}).nodes[0].checks_collectives
    assert not make_job(nodes=1).nodes[0].checks_collectives
