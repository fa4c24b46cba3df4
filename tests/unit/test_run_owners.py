"""Runs know who launched them: `ps` shows it where it helps and `--mine` keeps the caller's,
`prune` removes only the caller's runs unless `--all-users`, and `down`/`stop` of another
user's run by its id say whose it is."""
from __future__ import annotations

import io
import os
import shutil

import pytest

from orchestrate.cli.main import main
from orchestrate.config.request import HostFacts
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.engine.owners import RunOwner, login_name, run_owner
from orchestrate.engine.runs import RunState, list_runs
from tests.fakes import FakeCompose, FakeDockerClient, Script, wait_until

ME = os.getuid()
OTHER = ME + 4321  # a uid nobody here has: another user's runs need no account on this host


def user(uid: int, name: str) -> HostFacts:
    return HostFacts(run_as=f"{uid}:{uid}", user_name=name)


def runs_of_several_users(make_run, client: FakeDockerClient, *, gone_dir: bool = True) -> None:
    """In the fake engine, detached: ``mine`` and ``alices`` (ended, labelled with their owners),
    ``alices-going`` (running), ``old`` (ended, no owner label: started before them) whose run
    directory is gone when ``gone_dir`` (its owner then unknown), and ``old-mine`` (the same, its
    directory the caller's)."""
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    specs = (("mine", user(ME, "me"), False), ("alices", user(OTHER, "alice"), False),
             ("alices-going", user(OTHER, "alice"), True), ("old", HostFacts(), False),
             ("old-mine", HostFacts(), False))
    for run_id, host, hangs in specs:
        client.script("node0", Script(hang=True) if hangs else Script(["[0|0]:hi"]))
        make_run(run_id, client=client, host=host, detach=True, nodes=1).start()
    wait_until(lambda: sum(r.state is not RunState.RUNNING for r in list_runs(client)) == 4)
    if gone_dir:
        shutil.rmtree(next(r.run_dir for r in list_runs(client) if r.run_id == "old"))


def said(argv: list[str], client: FakeDockerClient) -> str:
    out = io.StringIO()
    assert main(client=client, argv=argv, out=out) == 0, out.getvalue()
    return out.getvalue()


def table(text: str) -> dict[str, list[str]]:
    """`ps`'s rows by run id, each split into its columns (the header's under "RUN")."""
    return {line.split()[0]: line.split() for line in text.splitlines() if not line.startswith("-")}


def test_a_runs_owner_is_its_label_else_its_directorys_owner_else_unknown(make_run):
    client = FakeDockerClient()
    runs_of_several_users(make_run, client)
    owners = {r.run_id: run_owner(r) for r in list_runs(client)}
    assert owners["mine"] == RunOwner(ME, "me") and owners["alices"] == RunOwner(OTHER, "alice")
    assert owners["old-mine"] == RunOwner(ME, login_name(ME))  # the launcher made its directory as its user
    assert owners["old"] == RunOwner(None) and owners["old"].shown == "unknown"
    assert RunOwner(OTHER).shown == str(OTHER)  # a uid with no name here
    assert RunOwner(OTHER).described == f"user {OTHER}" and RunOwner(None).described == "an unknown user"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another uid")
def test_a_run_without_an_owner_label_in_another_users_directory_is_theirs(make_run):
    client = FakeDockerClient()
    runs_of_several_users(make_run, client, gone_dir=False)
    old = next(r for r in list_runs(client) if r.run_id == "old")
    os.chown(old.run_dir, OTHER, OTHER)
    assert run_owner(old).uid == OTHER
    assert "old" not in said(["ps", "-q", "--mine"], client).split()
    assert "left 2 ended run(s) of other users: --all-users removes them\n" in said(["prune"], client)


def test_ps_shows_the_owner_where_a_run_is_not_the_callers_and_mine_keeps_the_callers(make_run):
    client = FakeDockerClient()
    runs_of_several_users(make_run, client)
    rows = table(said(["ps"], client))
    assert rows["RUN"][-2:] == ["OWNER", "WORKDIR"]
    assert {run_id: row[-2] for run_id, row in rows.items() if run_id != "RUN"} == {
        "mine": "me", "alices": "alice", "alices-going": "alice", "old": "unknown", "old-mine": login_name(ME)}
    assert sorted(said(["ps", "-q", "--mine"], client).split()) == ["mine", "old-mine"]
    assert said(["ps", "-q"], client).count("\n") == 5  # every user's without --mine
    mine = table(said(["ps", "--mine"], client))
    assert sorted(mine) == ["RUN", "mine", "old-mine"]
    assert "OWNER" not in mine["RUN"]  # every run listed is the caller's: the column would tell nothing
    assert said(["ps", "--mine", "--state", "running"], client) == "no running runs of yours\n"
    assert said(["ps", "--mine", "-q", "--state", "running"], client) == ""


def test_prune_removes_only_the_callers_runs_and_says_what_it_left_until_all_users(make_run):
    client = FakeDockerClient()
    runs_of_several_users(make_run, client)
    text = said(["prune"], client)
    assert "removed run mine (succeeded): " in text and "removed run old-mine (succeeded): " in text
    # alice's running run is not the caller's to count either
    assert text.endswith("pruned 2 run(s) in the engine\n"
                         "left 2 ended run(s) of other users (1 of an unknown user): --all-users removes them\n")
    assert sorted(r.run_id for r in list_runs(client)) == ["alices", "alices-going", "old"]
    assert said(["prune"], client) == ("nothing to prune in the engine: no run of yours there\n"
                                       "left 2 ended run(s) of other users (1 of an unknown user): --all-users"
                                       " removes them\n")
    text = said(["prune", "--all-users"], client)
    assert "removed run alices (succeeded, run of user alice): " in text
    assert "removed run old (succeeded, run of an unknown user): " in text
    assert text.endswith("pruned 2 run(s) in the engine (1 still running)\n") and "left" not in text
    assert [r.run_id for r in list_runs(client)] == ["alices-going"]


def test_down_and_stop_by_id_act_on_another_users_run_and_say_whose_it_is(make_run):
    client = FakeDockerClient()
    runs_of_several_users(make_run, client)
    assert said(["stop", "alices-going", "--timeout", "0"], client).startswith(
        "stopped node0 of run alices-going (run of user alice); logs and state kept")
    assert said(["stop", "old"], client) == ("run old (run of an unknown user) has already ended (succeeded); nothing"
                                             " to stop\n")
    assert "\nremoved run alices (run of user alice): container " in said(["down", "alices"], client)
    assert "\nremoved run mine: container " in said(["down", "mine"], client)  # the caller's own: no note
    assert sorted(r.run_id for r in list_runs(client)) == ["alices-going", "old", "old-mine"]
