"""The faults a run's nodes suffer now, read from its record by whoever looks at a run it does not
follow (``stacks RUN``): the launcher's events and ``fault RUN``'s notes, a fault in both counted
once, an undone fault gone, one done before its node's container started again gone."""
from __future__ import annotations

import json
from pathlib import Path

from orchestrate.config.fault_spec import parse_fault
from orchestrate.faults.in_effect import FaultStep, fault_steps, faults_in_effect
from orchestrate.faults.live_notes import note_live_fault
from orchestrate.outcome.events import EVENTS_FILE


def write_events(run_dir: Path, *events: dict) -> None:
    with open(run_dir / EVENTS_FILE, "a", encoding="utf-8") as handle:
        for event in events:
            handle.write(json.dumps(event) + "\n")


def in_effect(steps: list[FaultStep], started: dict | None = None) -> dict[str, list[str]]:
    return {node: [str(spec) for spec in specs] for node, specs in faults_in_effect(steps, started or {}).items()}


def test_the_launchers_faults_hold_until_undone(tmp_path):
    write_events(tmp_path,
                 {"time": 10.0, "event": "fault", "node": "node1", "spec": "pause:node1@t=5..60", "action": "pause"},
                 {"time": 11.0, "event": "fault", "node": "node2", "spec": "hang-rank:2@t=6", "action": "hang-rank",
                  "rank": 2},
                 {"time": 12.0, "event": "fault-failed", "node": "node0", "spec": "pause:node0", "error": "gone"},
                 {"time": 70.0, "event": "fault-ended", "node": "node1", "spec": "pause:node1@t=5..60",
                  "action": "pause"})
    steps = fault_steps(tmp_path)
    assert [(s.node, s.ended) for s in steps] == [("node1", False), ("node2", False), ("node1", True)]
    assert in_effect(steps) == {"node2": ["hang-rank:2@t=6"]}  # a failed fault was never done
    assert in_effect(steps[:2]) == {"node1": ["pause:node1@t=5..60"], "node2": ["hang-rank:2@t=6"]}


def test_a_fault_done_from_another_terminal_counts_once_from_both_records_and_ends_by_its_own_id(tmp_path):
    pause = parse_fault("pause:node1")
    assert note_live_fault(tmp_path, "a1", pause, "node1", "doing")
    assert note_live_fault(tmp_path, "a1", pause, "node1", "done")
    assert note_live_fault(tmp_path, "b2", pause, "node1", "done")  # the same spec, done again
    # the launcher following the run saw the first and recorded it with its id
    write_events(tmp_path, {"time": 1.0, "event": "fault", "node": "node1", "spec": "pause:node1", "by": "fault",
                            "fault_id": "a1"})
    steps = fault_steps(tmp_path)
    assert sorted((s.fault_id, s.ended) for s in steps) == [("a1", False), ("a1", False), ("b2", False)]
    assert in_effect(steps) == {"node1": ["pause:node1", "pause:node1"]}
    assert note_live_fault(tmp_path, "a1", pause, "node1", "ended")
    assert in_effect(fault_steps(tmp_path)) == {"node1": ["pause:node1"]}  # b2's still holds


def test_an_end_without_an_id_ends_only_the_launchers_own_fault_of_that_spec():
    """The launcher's end of its own pause leaves the same pause done from another terminal (which
    the container's start at 1.5 then shows to be the older one, gone)."""
    steps = [FaultStep(1.0, "node1", "pause:node1", False, "live"), FaultStep(2.0, "node1", "pause:node1", False),
             FaultStep(3.0, "node1", "pause:node1", True)]
    assert in_effect(steps) == {"node1": ["pause:node1"]}
    assert in_effect(steps, {"node1": 1.5}) == {}


def test_a_fault_done_before_its_node_started_again_no_longer_holds():
    steps = [FaultStep(10.0, "node1", "pause:node1", False), FaultStep(30.0, "node1", "hang-rank:1", False),
             FaultStep(10.0, "node0", "hang-rank:0", False)]
    assert in_effect(steps, {"node1": 20.0, "node0": None}) == {"node1": ["hang-rank:1"], "node0": ["hang-rank:0"]}
    assert in_effect(steps, {"node1": 40.0}) == {"node0": ["hang-rank:0"]}
    # done as it started: it holds
    assert in_effect(steps, {"node1": 30.0}) == {"node1": ["hang-rank:1"], "node0": ["hang-rank:0"]}


def test_the_launchers_end_of_one_fault_leaves_its_other_fault_on_the_same_node():
    steps = [FaultStep(1.0, "node1", "pause:node1@t=0..60", False),
             FaultStep(2.0, "node1", "slow:node1,cpus=0.5", False),
             FaultStep(3.0, "node1", "slow:node1,cpus=0.5", True)]
    assert in_effect(steps) == {"node1": ["pause:node1@t=0..60"]}


def test_a_record_that_is_not_a_fault_this_version_reads_is_left_out(tmp_path):
    write_events(tmp_path, {"time": 1.0, "event": "fault", "node": "node1", "spec": "melt:node1"},
                 {"time": 2.0, "event": "fault", "node": "node1"},
                 {"time": "later", "event": "fault", "node": "node3", "spec": "pause:node3"},
                 {"time": 3.0, "event": "fault", "node": "node2", "spec": "pause:node2"})
    assert in_effect(fault_steps(tmp_path)) == {"node2": ["pause:node2"]}


def test_no_record_at_all_is_no_fault(tmp_path):
    assert fault_steps(tmp_path / "gone") == [] and in_effect([]) == {}



def test_the_nodes_lost_for_good_are_named_from_either_record(tmp_path):
    """A ``lose`` done by the launcher (its events) or by ``fault RUN`` (its notes) names the node;
    other faults, a lose that failed, and one not done yet do not."""
    from orchestrate.faults.in_effect import lost_nodes

    assert lost_nodes(Path("")) == frozenset()  # a run with no directory
    write_events(tmp_path,
                 {"time": 1.0, "event": "fault", "node": "node1", "spec": "lose:node1@step=5", "action": "lose"},
                 {"time": 2.0, "event": "fault", "node": "node0", "spec": "kill:node0@t=3", "action": "kill"},
                 {"time": 3.0, "event": "fault-failed", "node": "node3", "spec": "lose:node3", "error": "gone"})
    assert note_live_fault(tmp_path, "c3", parse_fault("lose:node2"), "node2", "done")
    assert note_live_fault(tmp_path, "d4", parse_fault("lose:node4"), "node4", "doing")  # not done (yet)
    assert lost_nodes(tmp_path) == {"node1", "node2"}
