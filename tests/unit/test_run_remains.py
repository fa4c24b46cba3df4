"""A run's network and volume left with no container (its launcher killed between Compose making
them and making its nodes): `ps` names them, `down RUN` and `prune` remove them, by their owner's
rules; a run being made this moment (its launcher alive, or made moments ago) is not one."""
from __future__ import annotations

import io
import os
import socket

import pytest

from orchestrate.cli.main import main
from orchestrate.engine.labels import (COMPOSE_PROJECT_LABEL, LAUNCHER_LABEL, OWNER_LABEL, OWNER_NAME_LABEL,
                                       RUN_DIR_LABEL, RUN_ID_LABEL)
from orchestrate.engine.remains import (UNKNOWN_LAUNCHER_GRACE_S, WHEEL_SERVER_LABEL, left_behind, list_remains,
                                        list_wheel_servers_left)
from orchestrate.engine.runs import launcher_identity
from tests.fakes import FakeDockerClient, FakeNetwork, FakeVolume

ME = os.getuid()
OTHER = ME + 4321
# This process's pid with a start time it never had: a launcher that ended (its pid since reused)
ENDED_LAUNCHER = f"{socket.gethostname()}:{os.getpid()}:1"
OTHER_HOSTS_LAUNCHER = "another-host:4242:99"


def leave(client: FakeDockerClient, run_id: str, *, launcher: str = ENDED_LAUNCHER, uid: int = ME,
          run_dir: str = "", labelled: bool = True, age_s: float = 0.0, volume: bool = True) -> None:
    """What Compose made for run ``run_id`` before its launcher was killed: its network and volume
    (``labelled``: with the run's labels, as this version makes them; else Compose's alone)."""
    project = f"ddp-{run_id}"
    labels = {COMPOSE_PROJECT_LABEL: project}
    if labelled:
        labels |= {RUN_ID_LABEL: run_id, LAUNCHER_LABEL: launcher, OWNER_LABEL: str(uid),
                   OWNER_NAME_LABEL: "me" if uid == ME else "alice", RUN_DIR_LABEL: run_dir or f"/runs/{run_id}"}
    client.networks_by_name[f"{project}_ddp"] = FakeNetwork(client, f"{project}_ddp", dict(labels), age_s)
    if volume:
        client.volumes_by_name[f"{project}_shared"] = FakeVolume(client, f"{project}_shared", dict(labels), age_s)


def said(argv: list[str], client: FakeDockerClient, code: int = 0) -> str:
    out = io.StringIO()
    assert main(client=client, argv=argv, out=out) == code, out.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("alive, age_s, left", [
    (False, 0.0, True),  # its launcher is gone: nothing will make its nodes
    (True, 3600.0, False),  # its launcher is at work on them (making or removing), however long
    (None, UNKNOWN_LAUNCHER_GRACE_S - 1, False),  # cannot be asked, and made moments ago: its nodes may come
    (None, UNKNOWN_LAUNCHER_GRACE_S, True),
    (None, None, False),  # nothing says when it was made
])
def test_left_behind_only_where_its_launcher_is_gone_or_it_is_old_and_none_can_say(alive, age_s, left):
    assert left_behind(alive, age_s) is left


def test_a_runs_network_and_volume_with_no_container_are_its_remains_unless_being_made():
    client = FakeDockerClient()
    leave(client, "20261207-100000-aaaaaa")
    leave(client, "20261207-100001-bbbbbb", launcher=launcher_identity())  # its launcher is this process: alive
    leave(client, "20261207-100002-cccccc", launcher=OTHER_HOSTS_LAUNCHER)  # cannot be asked, made just now
    leave(client, "20261207-100003-dddddd", launcher=OTHER_HOSTS_LAUNCHER, age_s=UNKNOWN_LAUNCHER_GRACE_S + 5)
    leave(client, "20261207-100004-eeeeee", labelled=False, age_s=3600, volume=False)  # made before the labels
    leave(client, "20261207-100005-ffffff")
    client.running("ddp-20261207-100005-ffffff-node0-1", {COMPOSE_PROJECT_LABEL: "ddp-20261207-100005-ffffff"})
    client.networks_by_name["ddp-compose_default"] = FakeNetwork(  # the demo's project: not a run's
        client, "ddp-compose_default", {COMPOSE_PROJECT_LABEL: "ddp-compose"}, 3600)
    remains = {r.run_id: r for r in list_remains(client)}
    assert list(remains) == ["20261207-100004-eeeeee", "20261207-100003-dddddd", "20261207-100000-aaaaaa"]
    assert remains["20261207-100000-aaaaaa"].described == ("network ddp-20261207-100000-aaaaaa_ddp,"
                                                            " volume ddp-20261207-100000-aaaaaa_shared")
    assert str(remains["20261207-100000-aaaaaa"].run_dir) == "/runs/20261207-100000-aaaaaa"
    assert remains["20261207-100004-eeeeee"].described == "network ddp-20261207-100004-eeeeee_ddp"
    assert remains["20261207-100004-eeeeee"].them == "it" and remains["20261207-100000-aaaaaa"].them == "them"


def test_ps_names_them_under_the_list_by_the_same_filters_and_q_lists_runs_alone(tmp_path):
    client = FakeDockerClient()
    (tmp_path / "runs").mkdir()
    leave(client, "20261207-100000-aaaaaa", run_dir=str(tmp_path / "runs" / "20261207-100000-aaaaaa"))
    leave(client, "20261207-100001-bbbbbb", uid=OTHER)
    text = said(["ps"], client)
    assert text.splitlines()[0] == "no runs"
    assert text.splitlines()[1:] == [
        "run 20261207-100001-bbbbbb (run of user alice) left network ddp-20261207-100001-bbbbbb_ddp, volume"
        " ddp-20261207-100001-bbbbbb_shared with no container (its launcher ended before Compose made its nodes):"
        " python -m orchestrate down 20261207-100001-bbbbbb, or prune --all-users, removes them",
        "run 20261207-100000-aaaaaa left network ddp-20261207-100000-aaaaaa_ddp, volume"
        " ddp-20261207-100000-aaaaaa_shared with no container (its launcher ended before Compose made its nodes):"
        " python -m orchestrate down 20261207-100000-aaaaaa, or prune, removes them"]
    assert [line.split()[1] for line in said(["ps", "--mine"], client).splitlines()[1:]] == ["20261207-100000-aaaaaa"]
    runs_dir = str(tmp_path / "runs")
    assert [line.split()[1] for line in said(["ps", "--runs-dir", runs_dir], client).splitlines()[1:]] == [
        "20261207-100000-aaaaaa"]
    assert said(["ps", "-q"], client) == ""  # not runs: a script's `xargs down` gets none
    assert said(["ps", "--state", "failed"], client) == "no failed runs\n"  # they have no state
    client.running("ddp-20261207-100002-cccccc-node0-1", {RUN_ID_LABEL: "20261207-100002-cccccc",
                                                         COMPOSE_PROJECT_LABEL: "ddp-20261207-100002-cccccc"})
    lines = said(["ps"], client).splitlines()
    assert lines[2].startswith("20261207-100002-cccccc ") and len(lines) == 5  # under the list too
    assert lines[3].startswith("run 20261207-100001-bbbbbb (run of user alice) left ")
    assert lines[4].startswith("run 20261207-100000-aaaaaa left ")


def test_down_by_its_id_or_end_removes_them_and_an_id_of_nothing_is_still_refused(capsys):
    client = FakeDockerClient()
    leave(client, "20261207-100000-aaaaaa")
    leave(client, "20261207-100001-bbbbbb", uid=OTHER)
    assert said(["down", "aaaaaa"], client) == (
        "removed what run 20261207-100000-aaaaaa left with no container: network ddp-20261207-100000-aaaaaa_ddp,"
        " volume ddp-20261207-100000-aaaaaa_shared\n")
    assert said(["down", "20261207-100001-bbbbbb"], client).startswith(
        "removed what run 20261207-100001-bbbbbb (run of user alice) left with no container: network ")
    assert client.networks_by_name == {} and client.volumes_by_name == {}
    assert said(["down", "aaaaaa"], client, code=2) == ""
    assert capsys.readouterr().err.splitlines()[-1] == ("error: no run aaaaaa in the engine (see `python -m"
                                                        " orchestrate ps`)")


def test_prune_removes_the_callers_counts_other_users_and_all_users_removes_theirs():
    client = FakeDockerClient()
    leave(client, "20261207-100000-aaaaaa")
    leave(client, "20261207-100001-bbbbbb", uid=OTHER)
    leave(client, "20261207-100002-cccccc", labelled=False, age_s=3600)  # whose, nothing says
    leave(client, "20261207-100003-dddddd", launcher=launcher_identity())  # being made: not touched
    assert said(["prune"], client) == (
        "removed what run 20261207-100000-aaaaaa left with no container: network ddp-20261207-100000-aaaaaa_ddp,"
        " volume ddp-20261207-100000-aaaaaa_shared\n"
        "pruned 1 run(s) in the engine\n"
        "left 2 ended run(s) of other users (1 of an unknown user): --all-users removes them\n")
    text = said(["prune", "--all-users"], client)
    assert "removed what run 20261207-100001-bbbbbb (run of user alice) left with no container: " in text
    assert "removed what run 20261207-100002-cccccc (run of an unknown user) left with no container: " in text
    assert text.endswith("pruned 2 run(s) in the engine\n")
    assert sorted(client.networks_by_name) == ["ddp-20261207-100003-dddddd_ddp"]


def leave_wheel_server(client: FakeDockerClient, name: str, *, launcher: str = ENDED_LAUNCHER, uid: int = ME,
                       age_s: float = 0.0, container: bool = True) -> None:
    """What an image build killed while its wheel server ran leaves: the server's container (still
    running) and its network."""
    labels = {WHEEL_SERVER_LABEL: name, LAUNCHER_LABEL: launcher, OWNER_LABEL: str(uid),
              OWNER_NAME_LABEL: "me" if uid == ME else "alice"}
    client.networks_by_name[name] = FakeNetwork(client, name, dict(labels), age_s)
    if container:
        client.running(name, dict(labels))


def test_a_killed_builds_wheel_server_is_left_behind_unless_its_build_runs():
    client = FakeDockerClient()
    leave_wheel_server(client, "ddp-compose-wheels-aaaa")
    leave_wheel_server(client, "ddp-compose-wheels-bbbb", launcher=launcher_identity())  # its build goes on
    leave_wheel_server(client, "ddp-compose-wheels-cccc", container=False)  # its network alone is left
    left = {s.name: s for s in list_wheel_servers_left(client)}
    assert sorted(left) == ["ddp-compose-wheels-aaaa", "ddp-compose-wheels-cccc"]
    assert left["ddp-compose-wheels-aaaa"].described == ("container ddp-compose-wheels-aaaa,"
                                                         " network ddp-compose-wheels-aaaa")
    assert left["ddp-compose-wheels-cccc"].described == "network ddp-compose-wheels-cccc"


def test_prune_removes_the_callers_killed_builds_wheel_servers_and_counts_other_users(tmp_path):
    client = FakeDockerClient()
    leave_wheel_server(client, "ddp-compose-wheels-aaaa")
    leave_wheel_server(client, "ddp-compose-wheels-bbbb", uid=OTHER)
    (tmp_path / "runs").mkdir()
    assert said(["prune", "--runs-dir", str(tmp_path / "runs")], client) == (  # a build is no project's
        f"nothing to prune in {tmp_path / 'runs'}: no run of yours there\n")
    assert said(["prune"], client) == (
        "removed the wheel server of an image build that was killed: container ddp-compose-wheels-aaaa,"
        " network ddp-compose-wheels-aaaa\n"
        "nothing to prune in the engine: no run of yours there\n"
        "left 1 wheel server(s) of other users' killed image builds: --all-users removes them\n")
    assert sorted(client.containers_by_name) == sorted(client.networks_by_name) == ["ddp-compose-wheels-bbbb"]
    assert said(["prune", "--all-users"], client).startswith(
        "removed the wheel server of an image build that was killed (of user alice): container ")
    assert client.containers_by_name == {} and client.networks_by_name == {}
