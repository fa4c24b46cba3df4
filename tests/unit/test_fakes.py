"""The fake engine says no wherever Docker does: a fake that says yes to what the engine refuses
lets the code under test pass for the wrong reason. These pin its refusals, its stop timeout,
its replayed events and its injectable failures."""
from __future__ import annotations

import json
import time

import docker.errors
import pytest

from tests.fakes import FakeDockerClient, Script


def started(tmp_path, *scripts: Script, nodes: int = 1) -> tuple[FakeDockerClient, list]:
    client = FakeDockerClient()
    for i in range(nodes):
        client.script(f"node{i}", *(scripts or (Script(hang=True),)))
    services = {f"node{i}": {"image": "img", "labels": {"io.ddp-compose.run-id": "r"}} for i in range(nodes)}
    compose = tmp_path / "compose.json"
    compose.write_text(json.dumps({"name": "ddp-r", "services": services}))
    client.up(compose)
    return client, sorted(client.containers_by_name.values(), key=lambda c: c.name)


def status_code(exc: BaseException) -> int:
    return exc.response.status_code if getattr(exc, "response", None) is not None else 0


def test_pause_unpause_exec_and_remove_in_the_wrong_state_are_409s(tmp_path):
    client, [node] = started(tmp_path)
    with pytest.raises(docker.errors.APIError) as unpaused:
        node.unpause()
    assert status_code(unpaused.value) == 409 and "is not paused" in str(unpaused.value)
    node.pause()
    with pytest.raises(docker.errors.APIError, match="already paused"):
        node.pause()
    with pytest.raises(docker.errors.APIError, match="is paused"):
        client.api.exec_create(node.id, ["true"])
    with pytest.raises(docker.errors.APIError) as running:
        node.remove()
    assert status_code(running.value) == 409 and "cannot remove a running container" in str(running.value)
    node.unpause()
    node.kill()
    with pytest.raises(docker.errors.APIError) as exited:
        client.api.exec_create(node.id, ["true"])
    assert status_code(exited.value) == 409
    with pytest.raises(docker.errors.APIError, match="is not running"):
        node.pause()
    node.remove()  # an exited container goes without force
    assert node.name not in client.containers_by_name


def test_stop_waits_its_timeout_for_a_process_that_ignores_sigterm_then_kills(tmp_path):
    client, [stubborn] = started(tmp_path, Script(hang=True, ignore_sigterm=True))
    began = time.monotonic()
    stubborn.stop(timeout=1)
    assert time.monotonic() - began >= 0.95 and stubborn.exit_code == 137
    client, [polite] = started(tmp_path, Script(hang=True, on_sigterm=["[0|0]:saving"]))
    began = time.monotonic()
    polite.stop(timeout=5)
    assert time.monotonic() - began < 1 and polite.exit_code == 143
    assert [line for _, line in polite.log] == ["[0|0]:saving"]


def actions_since(client: FakeDockerClient, node, action: str) -> list[str]:
    """The engine's record of ``node`` from its latest ``action`` on."""
    actions = [e["Action"] for e in client.history if e["Actor"]["Attributes"]["name"] == node.name]
    return actions[len(actions) - 1 - actions[::-1].index(action):]


def test_a_signal_to_a_paused_container_resumes_it_as_the_engine_does(tmp_path):
    # moby 20.10.24, measured: `docker kill -s USR1` of a paused container records kill then
    # unpause, `docker kill` kill then die, and `docker stop` of one whose process traps SIGTERM
    # exits at once with its code
    client, [termed, killed, stopped] = started(tmp_path, Script(hang=True, on_sigterm=["[0|0]:saving"]), nodes=3)
    for node in (termed, killed, stopped):
        node.pause()
    termed.kill(signal="SIGTERM")
    killed.kill()
    began = time.monotonic()
    stopped.stop(timeout=5)
    assert time.monotonic() - began < 1
    assert [(n.status, n.exit_code) for n in (termed, killed, stopped)] == [("exited", 143), ("exited", 137),
                                                                           ("exited", 143)]
    assert actions_since(client, termed, "pause") == ["pause", "kill", "unpause", "die"]
    assert actions_since(client, killed, "pause") == ["pause", "kill", "die"]
    assert [line for _, line in stopped.log] == ["[0|0]:saving"]


def test_a_container_with_a_stop_signal_stays_paused_for_another_signal_until_unpaused(tmp_path):
    # an image whose STOPSIGNAL is SIGINT: the engine sends a SIGTERM to the frozen process and
    # leaves it paused; the process gets it when thawed
    client, [node] = started(tmp_path, Script(hang=True, on_sigterm=["[0|0]:saving"]))
    node.stop_signal = "SIGINT"
    node.pause()
    node.kill(signal="SIGTERM")
    assert node.status == "paused" and node.log == []
    node.unpause()
    assert (node.status, node.exit_code) == ("exited", 143)
    assert actions_since(client, node, "pause") == ["pause", "kill", "unpause", "die"]
    # resumed by its own stop signal instead: the SIGTERM sent before reaches it as it thaws
    client, [thawed] = started(tmp_path, Script(hang=True, on_sigterm=["[0|0]:saving"]))
    thawed.stop_signal = "SIGINT"
    thawed.pause()
    thawed.kill(signal="SIGTERM")
    thawed.kill(signal="SIGINT")
    assert (thawed.status, thawed.exit_code, thawed.pending) == ("exited", 143, [])
    assert [line for _, line in thawed.log] == ["[0|0]:saving"]


def test_a_forced_remove_of_a_live_container_kills_it_as_the_engine_records_it(tmp_path):
    # moby 20.10.24, measured: `docker rm -f` of a running or a paused container records kill
    # (signal 9), die (exit code 137), destroy; from the kill to the destroy its status is
    # "removing" (inspected at each event, 2026-12-02)
    client, nodes = started(tmp_path, nodes=2)
    nodes[1].pause()
    for node, since in zip(nodes, ("start", "pause")):
        node.remove(force=True)
        assert (node.status, node.exit_code) == ("removing", 137) and node.name not in client.containers_by_name
        events = [e for e in client.history if e["Actor"]["Attributes"]["name"] == node.name]
        events = events[len(events) - len(actions_since(client, node, since)) + 1:]
        assert [(e["Action"], e["Actor"]["Attributes"].get("signal"), e["Actor"]["Attributes"].get("exitCode"))
                for e in events] == [("kill", "9", None), ("die", None, "137"), ("destroy", None, None)]


def test_list_shows_the_live_unless_all_and_events_since_replay_the_past(tmp_path):
    client, [done, live] = started(tmp_path, nodes=2)
    done.kill()
    assert [c.name for c in client.containers.list()] == [live.name]
    assert [c.name for c in client.containers.list(all=True)] == [live.name, done.name]  # newest first, as docker ps
    before = time.time() - 1
    replayed = iter(client.events(since=int(before), filters={"label": ["com.docker.compose.service=node0"]},
                                  decode=True))
    assert [next(replayed)["Action"] for _ in range(3)] == ["start", "kill", "die"]
    fresh = client.events(filters={}, decode=True)  # no since: only what comes
    live.kill()
    assert next(iter(fresh))["Action"] == "kill"


def test_events_are_raw_bytes_unless_decoded_and_a_type_filter_keeps_that_type_alone(tmp_path):
    client, [node] = started(tmp_path)
    since = int(time.time()) - 1
    raw = next(iter(client.events(since=since, filters={"type": "container"})))  # docker-py's default
    assert isinstance(raw, bytes) and json.loads(raw)["Action"] == "start"
    assert next(iter(client.events(since=since, filters={"type": ["container"]}, decode=True)))["Action"] == "start"
    elsewhere = client.events(since=since, filters={"type": "network"}, decode=True)
    assert elsewhere.events.empty()  # no network event was replayed


@pytest.mark.parametrize("call", ["pause", "unpause", "stop", "restart", "remove", "kill", "logs", "exec",
                                  "disconnect", "containers.list", "events"])
def test_every_call_can_be_made_to_fail(tmp_path, call):
    client, [node] = started(tmp_path)
    if call == "unpause":
        node.pause()
    client.failures[call] = docker.errors.APIError(f"{call} refused")
    network = next(iter(client.networks_by_name.values()))
    do = {"pause": node.pause, "unpause": node.unpause, "stop": node.stop, "restart": node.restart,
          "remove": lambda: node.remove(force=True), "kill": node.kill, "logs": node.logs,
          "exec": lambda: client.api.exec_create(node.id, ["true"]), "disconnect": lambda: network.disconnect(node),
          "containers.list": client.containers.list, "events": client.events}[call]
    with pytest.raises(docker.errors.APIError, match=f"{call} refused"):
        do()


def test_a_restart_and_a_stop_record_what_the_engine_records(tmp_path):
    # moby 20.10.24, measured (`docker restart -t N`, `docker stop -t N`, `docker events`): -t 0
    # records kill 15, kill 9, die 137, stop, start, restart, the process never acting on its
    # SIGTERM; with a grace a process that takes its SIGTERM dies with its own code; one that
    # ignores it is killed when the grace runs out; a paused one is resumed by the first kill
    def recorded(client: FakeDockerClient, action) -> list[tuple]:
        before = len(client.history)
        action()
        return [(e["Action"], *(e["Actor"]["Attributes"][k] for k in ("signal", "exitCode")
                                if k in e["Actor"]["Attributes"])) for e in client.history[before:]]

    polite = Script(hang=True, on_sigterm=["[0|0]:saving"])
    restarted = [("stop",), ("start",), ("restart",)]
    client, [now] = started(tmp_path, polite, polite)
    assert recorded(client, lambda: now.restart(timeout=0)) == [("kill", "15"), ("kill", "9"), ("die", "137"),
                                                                 *restarted]
    assert now.status == "running" and now.log == []  # it never acted on its SIGTERM
    client, [graced] = started(tmp_path, polite, polite)
    assert recorded(client, lambda: graced.restart(timeout=5)) == [("kill", "15"), ("die", "143"), *restarted]
    assert [line for _, line in graced.log] == ["[0|0]:saving"]
    stubborn_script = Script(hang=True, ignore_sigterm=True)
    client, [stubborn] = started(tmp_path, stubborn_script, stubborn_script)
    began = time.monotonic()
    assert recorded(client, lambda: stubborn.restart(timeout=1)) == [("kill", "15"), ("kill", "9"), ("die", "137"),
                                                                      *restarted]
    assert time.monotonic() - began >= 0.95
    assert recorded(client, lambda: stubborn.stop(timeout=0)) == [("kill", "15"), ("kill", "9"), ("die", "137"),
                                                                   ("stop",)]
    client, [paused] = started(tmp_path, polite, polite)
    paused.pause()
    assert recorded(client, lambda: paused.restart(timeout=0)) == [("kill", "15"), ("unpause",), ("kill", "9"),
                                                                    ("die", "137"), *restarted]
    client, [stuck] = started(tmp_path, Script(hang=True, unkillable=True))
    with pytest.raises(docker.errors.APIError, match="did not receive an exit event"):
        stuck.restart(timeout=0)
    assert stuck.status == "running"


def test_a_hung_script_runs_until_killed_however_long(tmp_path):
    client, [node] = started(tmp_path, Script(hang=True))
    assert not node.killed.wait(0.5) and node.status == "running"
    node.kill()
    assert node.status == "exited" and node.exit_code == 137


def test_an_unkillable_process_outlives_every_signal_and_a_removed_container_is_a_404(tmp_path):
    client, [stuck, other] = started(tmp_path, Script(hang=True, unkillable=True), nodes=2)
    stuck.kill(signal="SIGTERM")
    stuck.kill()
    stuck.stop(timeout=0)
    assert stuck.status == "running" and not stuck.killed.is_set()
    other.remove(force=True)  # `docker rm -f` from elsewhere
    with pytest.raises(docker.errors.NotFound):
        other.kill(signal="SIGTERM")


@pytest.mark.parametrize("call", ["reload", "kill", "stop", "restart", "pause", "unpause", "top", "update", "logs"])
def test_every_call_on_a_removed_container_is_a_404(tmp_path, call):
    # A restart of a removed container used to start it again: an elastic job's launcher passed
    # for one that Docker stops with its 404.
    client, [node] = started(tmp_path)
    node.remove(force=True)
    with pytest.raises(docker.errors.NotFound, match=f"No such container: {node.name}"):
        getattr(node, call)(**({"cpu_quota": -1} if call == "update" else {}))
    assert node.status == "removing" and node.name not in client.containers_by_name  # its last word

def test_a_network_with_a_container_on_it_and_a_container_another_client_removes_are_refused(tmp_path):
    client, [node] = started(tmp_path)
    network = next(iter(client.networks_by_name.values()))
    with pytest.raises(docker.errors.APIError) as attached:
        network.remove()
    assert status_code(attached.value) == 403 and "has active endpoints" in str(attached.value)
    node.removing_elsewhere = 1  # one more 409, then gone
    with pytest.raises(docker.errors.APIError) as in_progress:
        node.remove(force=True)
    assert status_code(in_progress.value) == 409 and "already in progress" in str(in_progress.value)
    assert node.name in client.containers_by_name
    with pytest.raises(docker.errors.NotFound):
        node.remove(force=True)
    assert node.name not in client.containers_by_name
    network.remove()  # nothing on it now
    assert client.networks_by_name == {}


def test_top_lists_a_running_containers_processes_and_says_no_as_the_engine_does():
    from tests.unit.test_supervisor_collaborators import node_container

    client = FakeDockerClient()
    container = node_container(client, "r", "node0", Script(hang=True, processes=("python3 train.py",)))
    container.start()
    assert container.top(ps_args="-o pid,stat,args") == {
        "Titles": ["PID", "STAT", "COMMAND"],
        "Processes": [["4200", "Ss", "/sbin/docker-init -- python3 /opt/ddp-compose/orchestrate/node/main.py --peers node0"
                                     " -- torchrun"],
                      ["4201", "S", "python3 /opt/ddp-compose/orchestrate/node/main.py --peers node0 -- torchrun"],
                      ["4202", "S", "python3 train.py"]]}
    with pytest.raises(docker.errors.APIError, match="Couldn't find PID field") as refused:
        container.top(ps_args="-o stat,args")  # the engine tells the container's processes apart by pid
    assert refused.value.status_code == 500
    container.kill()
    with pytest.raises(docker.errors.APIError, match="is not running") as refused:
        container.top(ps_args="-o pid,stat,args")
    assert refused.value.status_code == 409


def test_logs_read_whole_keep_their_last_tail_lines_as_docker_pys_tail_does(tmp_path):
    client, [node] = started(tmp_path, Script(["a", "b", "c"], hang=True))
    deadline = time.monotonic() + 5
    while len(node.log) < 3:
        assert time.monotonic() < deadline, "the script never printed"
        time.sleep(0.01)
    assert node.logs() == node.logs(tail="all") == b"a\nb\nc\n"
    assert node.logs(tail=2) == b"b\nc\n" and node.logs(tail=0) == b"" and node.logs(tail=10) == b"a\nb\nc\n"
    stamped = node.logs(tail=1, timestamps=True).decode()
    assert stamped.endswith("Z c\n") and stamped.count("\n") == 1
