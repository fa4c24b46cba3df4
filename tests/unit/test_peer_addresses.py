"""A peer an error names by its address (gloo's ``Connection closed by peer [172.20.0.3]:12933``)
is named by its node too: the addresses the launcher read from the nodes' containers, and the
summary's lines that say the errors."""
from __future__ import annotations

import html
import json

from orchestrate.outcome.summary import format_summary
from orchestrate.report.page import write_report
from orchestrate.text import peers_named
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_launcher import report, run

LOST = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [{}]:12933"


def test_an_address_of_a_node_is_followed_by_its_name_and_any_other_left_as_it_is():
    nodes = {"172.20.0.3": "node1", "172.20.0.2": "node0"}
    assert peers_named(LOST.format("172.20.0.3"), nodes) == LOST.format("172.20.0.3") + " (node1)"
    assert peers_named("peers [172.20.0.2]:1 and [172.20.0.3]:2", nodes) == (
        "peers [172.20.0.2]:1 (node0) and [172.20.0.3]:2 (node1)")
    assert peers_named(LOST.format("10.0.0.9"), nodes) == LOST.format("10.0.0.9")  # no node's: as it was
    # gloo's connect error puts the peer's rank after the port: the node's name goes after it, not between
    refused = "timed out connecting: SO_ERROR: Connection refused, remote=[172.20.0.2]:30637$2"
    assert peers_named(refused, nodes) == refused + " (node0)"
    assert peers_named("172.20.0.3:12933 and [172.20.0.3]", nodes) == "172.20.0.3:12933 and [172.20.0.3]"


def error_file(job, node: str, message: str):
    """A Script.then that writes a worker's error file where torchrun's report says it is."""
    def write() -> None:
        host = job.run_dir / node / "torchrun/r_x/attempt_0/0/error.json"
        host.parent.mkdir(parents=True)
        host.write_text(json.dumps({"message": {"message": message, "extraInfo": {
            "py_callstack": f"Traceback (most recent call last):\n{message}", "timestamp": "1700000000"}}}))
    return write


def test_the_summary_names_the_node_of_a_peer_whose_connection_closed(make_run):
    job = make_run(nodes=2)
    client = FakeDockerClient()
    node1_address = "172.30.0.3"  # the fake engine's second container (node0's is .2)
    reported = {node: report(rank, 0, error_file=f"/ddp-run/{node}/torchrun/r_x/attempt_0/0/error.json")
                for rank, node in enumerate(("node0", "node1"))}
    outcome, _, _ = run(job, client,
                        node0=[Script(reported["node0"], exit_code=1,
                                      then=error_file(job, "node0", LOST.format(node1_address)))],
                        node1=[Script(reported["node1"], exit_code=1, then=error_file(job, "node1", "ValueError: bad"))])
    assert outcome.node_addresses == {"172.30.0.2": "node0", node1_address: "node1"}
    summary = format_summary(outcome).splitlines()
    assert "FAILED: node1 rank 1 failed (exit code 1): ValueError: bad" in summary, summary
    assert f"  then node0 rank 0: {LOST.format(node1_address)} (node1)" in summary, summary
    recorded = json.loads((job.run_dir / "outcome.json").read_text(encoding="utf-8"))
    assert recorded["node_addresses"] == outcome.node_addresses
    # the report page, written again from the run's directory alone (``report RUN``), says it as the summary does
    page = write_report(job.run_dir).read_text(encoding="utf-8")
    assert f"<li>node0 rank 0: {html.escape(LOST.format(node1_address))} (node1)</li>" in page


def test_the_failure_line_names_the_peer_too(make_job, tmp_path):
    from orchestrate.outcome.model import RunResult, Timings
    from orchestrate.outcome.node_result import NodeResult
    from orchestrate.outcome.root_cause import RootCause
    from orchestrate.outcome.states import NodePhase

    [node0] = make_job(nodes=1).nodes
    lost = NodeResult(node0, NodePhase.FAILED, 1, root_cause=RootCause(0, 0, 1, LOST.format("172.20.0.3")))
    result = RunResult("r1", tmp_path, [lost], Timings(), node_addresses={"172.20.0.3": "node1"})
    assert f"FAILED: node0 rank 0 failed (exit code 1): {LOST.format('172.20.0.3')} (node1)" in (
        format_summary(result).splitlines())


def test_a_nodes_addresses_are_replaced_by_its_containers_latest_and_kept_while_it_has_none():
    from orchestrate.supervise.supervisor import addresses_with

    def attrs(*addresses, null=False):
        if null:
            return {"NetworkSettings": None}
        return {"NetworkSettings": {"Networks": {f"net{i}": {"IPAddress": a} for i, a in enumerate(addresses)}}}

    known = addresses_with({}, "node0", attrs("10.0.0.2"))
    known = addresses_with(known, "node1", attrs("10.0.0.3", ""))
    assert known == {"10.0.0.2": "node0", "10.0.0.3": "node1"}
    # node1 restarted with node0's old address, and node0 with another: each name follows its container
    known = addresses_with(known, "node1", attrs("10.0.0.2"))
    assert known == {"10.0.0.2": "node1"}
    known = addresses_with(known, "node0", attrs("10.0.0.4"))
    assert known == {"10.0.0.2": "node1", "10.0.0.4": "node0"}
    # a container that has none now (stopped), or says null: what was known stands
    assert addresses_with(known, "node0", attrs()) == known
    assert addresses_with(known, "node0", attrs(null=True)) == known
    assert addresses_with(known, "node0", {"NetworkSettings": {"Networks": {"net": None}}}) == known
