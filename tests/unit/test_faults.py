from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrate.config.fault_spec import (USAGE, FaultAction, FaultSpec, check_fault_levels, check_fault_targets,
                                          parse_fault)
from orchestrate.config.link import parse_link
from orchestrate.config.run_config import RunConfig
from orchestrate.errors import EngineError, NodeLookupError, UsageError
from orchestrate.faults.inject import probe_node
from tests.fakes import FakeContainer, FakeDockerClient


@pytest.mark.parametrize("text, expected", [
    ("kill:node1@step=20", FaultSpec(FaultAction.KILL, "node1", None, 20)),
    ("pause:node0@t=15", FaultSpec(FaultAction.PAUSE, "node0", 15.0, None)),
    ("disconnect:node2@t=2.5s", FaultSpec(FaultAction.DISCONNECT, "node2", 2.5, None)),
    ("restart:node1", FaultSpec(FaultAction.RESTART, "node1", None, None)),
    ("slow:node1,cpus=0.2@t=5..20", FaultSpec(FaultAction.SLOW, "node1", 5.0, cpus=0.2, until_seconds=20.0)),
    ("slow:node0", FaultSpec(FaultAction.SLOW, "node0", cpus=0.25)),
    ("degrade:node0,rate=10mbit@step=10..20",
     FaultSpec(FaultAction.DEGRADE, "node0", at_step=10, until_step=20, rate_bits=10_000_000)),
    ("kill-rank:3@step=7", FaultSpec(FaultAction.KILL_RANK, at_step=7, rank=3)),
    ("hang-rank:1@t=0..12", FaultSpec(FaultAction.HANG_RANK, at_seconds=0.0, rank=1, until_seconds=12.0)),
    ("pause:node1@t=4..9.5", FaultSpec(FaultAction.PAUSE, "node1", 4.0, until_seconds=9.5)),
    # the run's own rendezvous store: its host lost, hung or cut off (a hung store leaves the
    # workers' steps going, so its end may be a step)
    ("kill:store@step=5", FaultSpec(FaultAction.KILL, "store", at_step=5)),
    ("pause:store@step=5..15", FaultSpec(FaultAction.PAUSE, "store", at_step=5, until_step=15)),
    ("disconnect:store@t=2..30", FaultSpec(FaultAction.DISCONNECT, "store", 2.0, until_seconds=30.0)),
])
def test_fault_specs_parse_and_print_back(text, expected):
    assert parse_fault(text) == expected
    assert parse_fault(str(expected)) == expected


@pytest.mark.parametrize("text, written", [
    ("slow:node1@t=5s..20s", "slow:node1,cpus=0.25@t=5..20"),
    ("pause:node1@t=4..t=9.5", "pause:node1@t=4..9.5"),
    ("degrade:node0@step=10..step=20", "degrade:node0,rate=10mbit@step=10..20"),
    ("partition:node0|node1@t=8..t=20", "partition:node0|node1@t=8..20"),
])
def test_an_end_that_repeats_its_unit_reads_as_the_same_fault(text, written):
    assert str(parse_fault(text)) == written


@pytest.mark.parametrize("text", ["pause:node1@t=4..step=9", "degrade:node0@step=10..t=20",
                                  "partition:node0|node1@t=8..step=20"])
def test_an_end_in_another_unit_than_its_start_is_refused(text):
    with pytest.raises(UsageError, match="invalid --fault"):
        parse_fault(text)


def test_a_fault_says_its_defaults_when_printed():
    assert str(parse_fault("slow:node0")) == "slow:node0,cpus=0.25"
    assert str(parse_fault("degrade:node1@t=3")) == "degrade:node1,rate=10mbit@t=3"
    assert str(parse_fault("hang-rank:1@t=0..12")) == "hang-rank:1@t=0..12"


LASTING = "pause, disconnect, slow, degrade, hang-rank, disk-full, partition, lossy"
AFTER_THE_START = "the end must come after the start"
PERCENTAGE = "p is a percentage above 0 and below 100, e.g. p=1%"
IN_ATTEMPT = "@step=+N counts N steps (1 or more) into an attempt, with no end"
CPUS = "cpus must be a number of CPUs of 0.01 or more, e.g. 0.2"
RELATIVE_GLOB = "path is a glob relative to the work directory, e.g. path=checkpoints/*"


@pytest.mark.parametrize("text, message", [
    ("explode:node1", "the kind must be one of kill, lose, pause, disconnect, restart, preempt, slow, degrade,"
                      " kill-rank, hang-rank, torn-write, disk-full, partition, lossy"),
    ("kill", USAGE),
    ("kill:node1@step=x", USAGE),
    ("kill:node1@when=3", USAGE),
    ("kill:worker1", "kill aims at a node, e.g. kill:node1"),
    ("kill-rank:node1", "kill-rank aims at a global rank, e.g. kill-rank:1"),
    ("restart:store", "restart aims at a node, e.g. restart:node1; the rendezvous store takes kill, pause or"
                      " disconnect"),
    ("kill-rank:store", "kill-rank aims at a global rank, e.g. kill-rank:1"),
    ("torn-write:store", "torn-write aims at a node, e.g. torn-write:node1; the rendezvous store takes kill, pause or"
                         " disconnect"),
    ("pause:node1@step=5..9", "while pause lasts no step is reported, so an end at a step never comes; give it in"
                              " seconds, e.g. @t=5..20"),
    ("kill:node1@t=2..5", f"kill has no end (only {LASTING} last)"),
    ("kill-rank:1@step=3..5", f"kill-rank has no end (only {LASTING} last)"),
    ("slow:node1@t=9..5", AFTER_THE_START),
    ("slow:node1@t=5..5", AFTER_THE_START),  # an end at its start: over before it began
    ("degrade:node1@step=5..5", AFTER_THE_START),
    ("degrade:node1@step=5..3", AFTER_THE_START),
    ("hang-rank:1@step=5..9", "while hang-rank lasts no step is reported, so an end at a step never comes; give it in"
                              " seconds, e.g. @t=5..20"),
    ("kill:node1@step=+0", IN_ATTEMPT),
    ("degrade:node1@step=+2..5", IN_ATTEMPT),
    ("slow:node1,rate=1gbit", "slow takes cpus="),
    ("degrade:node1,rate=1gbit,rate=2gbit", "degrade takes rate="),  # once
    ("pause:node1,cpus=1", "pause takes no options"),
    ("slow:node1,cpus=0", CPUS),
    ("slow:node1,cpus=0.009", CPUS),
    ("slow:node1,cpus=many", CPUS),
    ("degrade:node1,rate=fast", "rate 'fast': expected e.g. 100mbit, 1gbit, 10gbit"),
    ("degrade:node1,rate=0.5bit", "rate '0.5bit': expected e.g. 100mbit, 1gbit, 10gbit"),  # 0 bits: a tbf tc refuses
    ("degrade:node1,rate=10mbps", "rate=10mbps: tc reads bps as bytes per second; write rate=80mbit, or rate=10mbit for"
                                  " bits"),
    ("lossy:node1,p=0", PERCENTAGE),
    ("lossy:node1,p=100%", PERCENTAGE),
    ("lossy:node1,p=half", PERCENTAGE),
    ("torn-write:node1,path=/etc/x", RELATIVE_GLOB),
    ("disk-full:node1,path=ckpt/../../x", RELATIVE_GLOB),
    ("partition:node0;node1", "usage: partition:NODES|NODES[@t=S[..END]|@step=N], e.g. partition:node0,node1|node2,"
                              "node3@t=5..20 (a partition's end is in seconds: no step comes while the network is"
                              " split)"),
    ("partition:node0|node1@t=5..5", AFTER_THE_START),
])
def test_bad_fault_specs_are_refused_saying_what_is_wrong(text, message):
    with pytest.raises(UsageError) as refused:
        parse_fault(text)
    assert str(refused.value) == f"invalid --fault {text!r}: {message}"


@pytest.mark.parametrize("text, expected", [
    ("slow:node1,cpus=0.01", FaultSpec(FaultAction.SLOW, "node1", cpus=0.01)),  # the least
    ("lossy:node1,p=0.5%", FaultSpec(FaultAction.LOSSY, "node1", loss_pct=0.5)),
    ("lossy:node1,p=99.9", FaultSpec(FaultAction.LOSSY, "node1", loss_pct=99.9)),
    ("lossy:node1", FaultSpec(FaultAction.LOSSY, "node1", loss_pct=1.0)),  # the defaults, said in the spec
    ("degrade:node1", FaultSpec(FaultAction.DEGRADE, "node1", rate_bits=10_000_000)),
    # a save's name may hold an "=" (Lightning's "epoch=3-step=100.ckpt")
    ("torn-write:node0,path=ckpt/epoch=*.ckpt", FaultSpec(FaultAction.TORN_WRITE, "node0", path="ckpt/epoch=*.ckpt")),
    ("kill:node1@step=+3", FaultSpec(FaultAction.KILL, "node1", at_step=3, in_attempt=True)),
    ("degrade:node1@step=0..1", FaultSpec(FaultAction.DEGRADE, "node1", at_step=0, until_step=1,
                                          rate_bits=10_000_000)),  # a script that counts from step 0
    ("partition:node0|node1@t=0..0.5", FaultSpec(FaultAction.PARTITION, at_seconds=0.0, until_seconds=0.5,
                                                 groups=(("node0",), ("node1",)))),
    ("partition:node0|node1@step=4", FaultSpec(FaultAction.PARTITION, at_step=4, groups=(("node0",), ("node1",)))),
])
def test_fault_specs_at_their_bounds_parse_and_print_back(text, expected):
    assert parse_fault(text) == expected
    assert parse_fault(str(expected)) == expected


def test_a_fault_in_an_attempt_fires_when_that_attempt_has_done_its_steps():
    fault = parse_fault("kill:node1@step=+3")
    assert str(fault) == "kill:node1@step=+3"
    assert not fault.due(100.0, 50, None)  # no attempt begun since the fault before it fired
    assert not fault.due(100.0, 50, 2) and fault.due(0.0, None, 3) and fault.due(0.0, None, 4)


def test_faults_fire_at_their_time_or_step_and_end_at_theirs():
    at_time, at_step, now = parse_fault("kill:node1@t=5"), parse_fault("kill:node1@step=20"), parse_fault("kill:node1")
    assert not at_time.due(4.9, None) and at_time.due(5.0, None)
    assert not at_step.due(100.0, None) and not at_step.due(100.0, 19) and at_step.due(0.0, 20)
    assert now.due(0.0, None)
    timed, stepped = parse_fault("slow:node1@t=5..20"), parse_fault("degrade:node1@step=3..8")
    assert not timed.end_due(19.9, None) and timed.end_due(20.0, None)
    assert not stepped.end_due(1000.0, 7) and stepped.end_due(0.0, 8)
    assert not at_time.end_due(10**6, 10**6)  # a fault without an end never ends


def test_faults_must_target_nodes_and_ranks_of_the_run():
    nodes = ["node0", "node1"]
    check_fault_targets([parse_fault("kill:node1"), parse_fault("kill-rank:3")], nodes, world_size=4)
    with pytest.raises(UsageError) as refused:
        check_fault_targets([parse_fault("kill:node2")], nodes, world_size=4)
    assert str(refused.value) == "--fault kill:node2: no node2 in this run (nodes: node0, node1)"
    with pytest.raises(UsageError) as refused:
        check_fault_targets([parse_fault("partition:node0,node3|node1,node4")], nodes, world_size=4)
    assert str(refused.value) == ("--fault partition:node0,node3|node1,node4: no node3, node4 in this run"
                                  " (nodes: node0, node1)")
    with pytest.raises(UsageError, match=r"no rank 4 in this run \(ranks 0-3\)"):
        check_fault_targets([parse_fault("hang-rank:4")], nodes, world_size=4)


NO_SLOWER = "would leave node1 as fast, or make it faster"
NO_SLOWER_LINK = "would leave node1's link as fast, or make it faster"


@pytest.mark.parametrize("link, cpus, fault, refused", [
    # the user's trial: node1's link went from 50 Mbit/s up to 1 Gbit/s, and the fault was "injected"
    ("rate=50mbit", None, "degrade:node1,rate=1gbit@step=3..6",
     f"degrade:node1,rate=1gbit@step=3..6: a degraded link's rate must be below the run's --link rate=50mbit"
     f" (rate=1gbit {NO_SLOWER_LINK}); e.g. rate=5mbit"),
    ("rate=50mbit", None, "degrade:node1,rate=50mbit", f"degrade:node1,rate=50mbit: a degraded link's rate must be"
     f" below the run's --link rate=50mbit (rate=50mbit {NO_SLOWER_LINK}); e.g. rate=5mbit"),  # the same: a no-op
    ("rate=10mbit,delay=5ms", None, "degrade:node1", f"degrade:node1,rate=10mbit: a degraded link's rate must be"
     f" below the run's --link rate=10mbit (rate=10mbit {NO_SLOWER_LINK}); e.g. rate=1mbit"),  # its default rate
    (None, 0.5, "slow:node1,cpus=1", f"slow:node1,cpus=1: a slow node's cpus must be below its --cpus-per-node 0.5"
     f" (cpus=1 {NO_SLOWER}); e.g. cpus=0.25"),
    (None, 0.5, "slow:node1,cpus=0.5@t=1..5", f"slow:node1,cpus=0.5@t=1..5: a slow node's cpus must be below its"
     f" --cpus-per-node 0.5 (cpus=0.5 {NO_SLOWER}); e.g. cpus=0.25"),
    (None, 0.25, "slow:node1", f"slow:node1,cpus=0.25: a slow node's cpus must be below its --cpus-per-node 0.25"
     f" (cpus=0.25 {NO_SLOWER}); e.g. cpus=0.125"),  # its default quota
])
def test_a_slow_or_degrade_that_would_leave_its_node_no_slower_is_refused_by_the_runs_config(link, cpus, fault,
                                                                                              refused):
    with pytest.raises(UsageError) as refusal:
        RunConfig(nodes=2, link=parse_link(link) if link else None, cpus_per_node=cpus, faults=(parse_fault(fault),))
    assert str(refusal.value) == f"--fault {refused}"


@pytest.mark.parametrize("link, cpus, fault", [
    ("rate=50mbit", None, "degrade:node1,rate=49mbit"),
    ("delay=20ms", None, "degrade:node1,rate=100gbit"),  # a link without a rate is unshaped: any rate degrades it
    (None, None, "degrade:node1,rate=100gbit"),
    (None, 0.5, "slow:node1,cpus=0.49"),
    (None, None, "slow:node1,cpus=64"),  # no limit here: the engine's CPUs are the pre-flight's to compare
    ("rate=1mbit", 0.1, "kill:node1"),
])
def test_a_slow_or_degrade_below_what_the_node_has_is_taken(link, cpus, fault):
    RunConfig(nodes=2, link=parse_link(link) if link else None, cpus_per_node=cpus, faults=(parse_fault(fault),))


def test_the_levels_rule_names_a_limit_it_is_given_and_the_fault_as_the_caller_says():
    check_fault_levels([parse_fault("slow:node1,cpus=4")], None, None)  # nothing known: nothing to compare
    with pytest.raises(UsageError) as refusal:
        check_fault_levels([parse_fault("degrade:node0,rate=1mbit"), parse_fault("slow:node1,cpus=2")], None, 2,
                           "the engine's 2 CPUs", said="")
    assert str(refusal.value) == f"slow:node1,cpus=2: a slow node's cpus must be below the engine's 2 CPUs (cpus=2" \
                                 f" {NO_SLOWER}); e.g. cpus=1"


def test_a_fault_to_the_store_needs_a_store_container_of_the_runs_own():
    store_faults = [parse_fault("kill:store@step=3"), parse_fault("pause:store@t=1..4")]
    check_fault_targets(store_faults, ["node0", "node1"], world_size=2, store_container=True)
    with pytest.raises(UsageError) as refused:
        check_fault_targets(store_faults, ["node0", "node1"], world_size=2)
    assert str(refused.value) == ("--fault kill:store@step=3: the rendezvous store is a container of the run's own"
                                  " only with --rdzv c10d --rdzv-store container; otherwise node0's torchrun agent"
                                  " holds it, and kill:node0 takes it with the node")


def test_probe_names_paused_gone_and_cut_off_nodes_but_not_ended_ones():
    import requests

    client = FakeDockerClient()
    container = FakeContainer(client, "p-node1-1", {"labels": {"com.docker.compose.project": "p"}})
    client.containers_by_name[container.name] = container
    container.status = "running"
    assert probe_node(container, "ddp") is None
    container.networks = {"bridge": {}}  # off the run's network, on another
    assert probe_node(container, "ddp") == "it is cut off from the ddp network"
    container.status = "restarting"  # still there: not ended
    assert probe_node(container, "ddp") == "it is cut off from the ddp network"
    container.status = "running"
    container.pause()
    assert probe_node(container, "ddp") == "its container is paused (hung)"
    # A node that ended is not hung: its own exit says how it ended (a peer's failure closed
    # its connections, and it exited before the probe; it must not be blamed).
    container.status = "exited"
    assert probe_node(container, "ddp") is None
    client.failures["reload"] = requests.exceptions.ConnectionError("Connection refused")
    assert probe_node(container, "ddp") is None  # an engine that cannot say blames no node
    del client.failures["reload"]
    del client.containers_by_name[container.name]
    assert probe_node(container, "ddp") == "its container is gone (No such container: p-node1-1)"


def test_oom_kills_come_from_the_cgroup_counter_or_the_exited_state():
    from orchestrate.faults.inject import oom_kills

    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"
    assert oom_kills({"Running": True}, v1) == 2
    assert oom_kills({"Running": True}, v2) == 1
    assert oom_kills({"Running": False, "OOMKilled": True}, None) == 1
    assert oom_kills({"Running": True}, "oom_kill 0\n") == 0


@pytest.mark.parametrize("text, groups, at, until", [
    ("partition:node0,node1|node2,node3@t=5..20", (("node0", "node1"), ("node2", "node3")), 5.0, 20.0),
    ("partition:node2|node0,node1", (("node2",), ("node0", "node1")), None, None),
])
def test_a_partition_parses_into_two_groups_and_prints_back(text, groups, at, until):
    fault = parse_fault(text)
    assert (fault.action, fault.groups, fault.at_seconds, fault.until_seconds) == (FaultAction.PARTITION, groups, at,
                                                                                   until)
    assert fault.nodes == groups[0] + groups[1]
    assert parse_fault(str(fault)) == fault and str(fault) == text


@pytest.mark.parametrize("text, message", [
    ("partition:node0", "usage: partition:NODES|NODES"),
    ("partition:node0|node1@step=3..9", "usage: partition:NODES|NODES"),
    ("partition:node0,node1|node1", "a node cannot be in both groups"),
    ("partition:node0|rank1", "a partition's groups are nodes"),
    ("partition:node0|node1@t=9..3", "the end must come after the start"),
])
def test_bad_partitions_are_refused(text, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_fault(text)


def test_a_partition_must_name_nodes_of_the_run():
    with pytest.raises(UsageError, match=r"no node4 in this run"):
        check_fault_targets([parse_fault("partition:node0|node4")], ["node0", "node1"], 2)


def test_a_partition_cuts_each_node_off_the_other_groups_addresses_only():
    from orchestrate.faults.network import partition_routes, route_commands
    addresses = {"node0": "10.0.0.2", "node1": "10.0.0.3", "node2": "10.0.0.4", "node3": "10.0.0.5"}
    cut = partition_routes((("node0", "node1"), ("node2", "node3")), addresses)
    assert cut == {"node0": ["10.0.0.4", "10.0.0.5"], "node1": ["10.0.0.4", "10.0.0.5"],
                   "node2": ["10.0.0.2", "10.0.0.3"], "node3": ["10.0.0.2", "10.0.0.3"]}
    assert route_commands(["10.0.0.4"], add=True) == [["ip", "route", "add", "blackhole", "10.0.0.4/32"]]
    assert route_commands(["10.0.0.4"], add=False) == [["ip", "route", "del", "blackhole", "10.0.0.4/32"]]
    with pytest.raises(NodeLookupError, match="node3 not running"):
        partition_routes((("node0",), ("node3",)), {"node0": "10.0.0.2"})


def test_a_run_with_a_partition_gets_net_admin_for_its_routes():
    from orchestrate.config.run_config import RunConfig
    assert RunConfig(nodes=2, faults=(parse_fault("partition:node0|node1@t=1..2"),)).shapes_links
    assert not RunConfig(nodes=2, faults=(parse_fault("kill:node1"),)).shapes_links


def test_a_heal_flushes_every_blackhole_route_of_the_running_nodes_and_passes_one_that_ended():
    from orchestrate.faults.network import heal
    client = FakeDockerClient()
    containers = {}
    for name in ("node0", "node1", "node2"):
        container = FakeContainer(client, f"p-{name}-1", {"labels": {"com.docker.compose.project": "p"}})
        client.containers_by_name[container.name] = container
        container.status = "running"
        containers[name] = container
    containers["node1"].status = "exited"  # it ended while split: the engine refuses an exec (409)
    heal(client, containers, (("node0",), ("node1", "node2")))
    # one command each, whose output is not needed: what docker's exec may lose cannot keep a split
    asked = [(c[1], c[2]) for c in client.calls if c[0] == "exec_create"]
    assert asked == [("p-node0-1", ("ip", "route", "flush", "type", "blackhole")),
                     ("p-node2-1", ("ip", "route", "flush", "type", "blackhole"))]
    client.command_outputs[("p-node2-1", "ip")] = (2, b"RTNETLINK answers: Operation not permitted\n")
    with pytest.raises(EngineError, match=r"cannot heal the network at p-node2-1 \(ip route flush type blackhole\):"
                                          r" RTNETLINK answers: Operation not permitted \(the run's nodes lack NET_ADMIN"):
        heal(client, containers, (("node0",), ("node1", "node2")))


def test_a_lossy_fault_refused_for_want_of_net_admin_says_so_not_iptables_own_you_must_be_root():
    """iptables in a node without NET_ADMIN, run as root all the same, blames root."""
    from orchestrate.faults.network import as_root

    client = FakeDockerClient()
    container = FakeContainer(client, "p-node1-1", {"labels": {"com.docker.compose.project": "p"}})
    client.containers_by_name[container.name] = container
    container.status = "running"
    client.command_outputs[("p-node1-1", "iptables")] = (
        4, b"iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied"
           b" (you must be root)\n")
    with pytest.raises(EngineError, match=r"Permission denied \(you must be root\) \(the run's nodes lack NET_ADMIN"):
        as_root(client, container, [["iptables", "-w", "-A", "INPUT", "-j", "DROP"]], "shape the link")


def test_live_fault_notes_are_read_once_each_and_a_line_still_being_written_waits(tmp_path):
    from orchestrate.faults.live_notes import LiveFaultReader, note_live_fault
    from orchestrate.plan.layout import LIVE_FAULTS_FILE

    reader = LiveFaultReader(tmp_path)
    assert reader.take() == []  # none yet
    assert note_live_fault(tmp_path, "a1", parse_fault("slow:node1,cpus=0.2@t=0..30"), "node1", "doing")
    assert note_live_fault(tmp_path, "b2", parse_fault("kill-rank:3"), "node2", "failed", error="no such process")
    first = reader.take()
    assert [(n.id, str(n.spec), n.node, n.phase, n.error) for n in first] == [
        ("a1", "slow:node1,cpus=0.2@t=0..30", "node1", "doing", ""),
        ("b2", "kill-rank:3", "node2", "failed", "no such process")]
    assert reader.take() == []
    with open(tmp_path / LIVE_FAULTS_FILE, "a") as handle:
        handle.write("not json\n")  # skipped, and what follows still read
        handle.write('{"id": "c3", "time": 1.0, "spec": "kill:node1", "node": "node1", "phase": "launched"}\n')
        handle.write('{"id": "c3", "time": 1.0, "spec": "kill:node1", "node": "no')  # half a line
        handle.flush()
        assert reader.take() == []  # the unknown phase skipped, the half line waits
        handle.write('de1", "phase": "ended"}\n')
    [note] = reader.take()
    assert (note.id, str(note.spec), note.node, note.phase, note.time) == ("c3", "kill:node1", "node1", "ended", 1.0)


def test_a_live_fault_note_where_the_run_directory_cannot_be_written_says_false(tmp_path, monkeypatch):
    from orchestrate.faults.live_notes import LiveFaultReader, note_live_fault

    assert not note_live_fault(tmp_path / "gone", "a1", parse_fault("kill:node1"), "node1", "doing")
    assert not note_live_fault(None, "a1", parse_fault("kill:node1"), "node1", "doing")
    monkeypatch.chdir(tmp_path)  # no run directory (an empty label): not the current directory
    assert not note_live_fault(Path(""), "a1", parse_fault("kill:node1"), "node1", "doing")
    assert not (tmp_path / "live-faults.jsonl").exists()
    assert note_live_fault(tmp_path, "a1", parse_fault("kill:node1"), "node1", "doing")  # a file here...
    assert LiveFaultReader(Path("")).take() == []  # ...is not the notes of a run without a directory
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "live-faults.jsonl").mkdir()  # not a file: the append fails
    assert not note_live_fault(tmp_path / "run", "a1", parse_fault("kill:node1"), "node1", "doing")


def test_a_pause_runc_could_not_freeze_at_once_is_tried_again_and_another_refusal_is_not():
    import docker

    from orchestrate.faults.inject import FREEZE_TRIES, pause_node

    client = FakeDockerClient()
    node = client.running("p-node1")
    busy = docker.errors.APIError("Cannot pause container: OCI runtime pause failed: unable to freeze: unknown")
    client.failures["pause"] = busy
    tries = []

    def pause_once_busy() -> None:
        tries.append(1)
        if len(tries) == 3:
            client.failures.pop("pause")
        FakeContainer.pause(node)

    node.pause = pause_once_busy
    pause_node(node, retry_s=0.0)
    assert node.status == "paused" and len(tries) == 3  # refused twice, frozen the third time
    client.failures["pause"] = busy
    with pytest.raises(docker.errors.APIError, match="unable to freeze"):
        pause_node(node, retry_s=0.0)
    assert len(tries) == 3 + FREEZE_TRIES  # then it gives up, with the engine's words
    client.failures.clear()
    ended = client.running("p-node2")
    ended.status = "exited"
    calls = len(client.calls)
    with pytest.raises(docker.errors.APIError, match="is not running"):
        pause_node(ended, retry_s=0.0)
    assert len(client.calls) == calls + 1  # a refusal of another kind: no second try
