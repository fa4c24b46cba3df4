"""Host paths mounted into every node (``--mount HOST[:NODE][:ro]``): parsed, checked on the host
(present, no two at one node path), kept off the node's own paths, rendered as binds for compose
and Slurm nodes alike, shown by the plan, refused on the command line with one line and exit 2,
and taken by the library and the plugin by the option's own parser."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from orchestrate.config.mounts import Mount, parse_mount
from orchestrate.config.request import RunRequest
from orchestrate.config.run_config import RunConfig
from orchestrate.engine.compose_file import render_compose
from orchestrate.errors import UsageError
from orchestrate.plan.layout import mount_conflict
from orchestrate.plan.show import format_plan
from orchestrate.slurm.cluster import render_slurm_compose


def test_a_mount_is_a_host_path_with_an_optional_node_path_and_mode():
    assert parse_mount("/data") == Mount(Path("/data"))
    assert parse_mount("~/ds:/data/ds:ro") == Mount(Path("~/ds"), "/data/ds", read_only=True)
    assert parse_mount("ds:/data//x/:rw") == Mount(Path("ds"), "/data/x", read_only=False)
    assert parse_mount("/srv/ro") == Mount(Path("/srv/ro"))  # a last part named ro alone is a path
    assert parse_mount("/srv:ro") == Mount(Path("/srv"), read_only=True)
    for bad, said in (("", "usage"), (":ro", "usage"), ("a:b:c:d", "usage"), ("/d:data", "must be absolute")):
        with pytest.raises(UsageError, match=said):
            parse_mount(bad)


def test_the_run_takes_each_source_whole_and_refuses_one_missing_or_two_at_one_node_path(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.chdir(tmp_path)
    config = RunConfig(workdir=tmp_path, mounts=(parse_mount("data"), parse_mount("data:/d:ro")))
    assert config.mounts == (Mount(data, str(data)), Mount(data, "/d", read_only=True))
    with pytest.raises(UsageError, match=r"^--mount nowhere: '.*/nowhere' does not exist on this host$"):
        RunConfig(workdir=tmp_path, mounts=(parse_mount("nowhere"),))
    with pytest.raises(UsageError, match=r"^--mount data:/d: another --mount is at /d in the nodes already$"):
        RunConfig(workdir=tmp_path, mounts=(parse_mount(f"{data}:/d"), parse_mount("data:/d")))


def test_a_node_path_may_not_cover_lie_above_or_inside_the_nodes_own():
    assert mount_conflict("/data") == "" and mount_conflict("/home/alice/data") == ""
    assert mount_conflict("/tmp/scratch") == "" and mount_conflict("/home/node/.cache/hf") == ""  # inside: fine
    assert mount_conflict("/workspace") == "/workspace"
    assert mount_conflict("/workspace/data") == "/workspace"  # would put a mount point in the user's work directory
    assert mount_conflict("/opt") == "/opt/ddp-compose"  # above: hides the tool and the image's Python
    assert mount_conflict("/opt/") == "/opt/ddp-compose" and mount_conflict("/optX") == ""  # a name, not a prefix
    assert mount_conflict("/") == "/workspace"
    assert mount_conflict("/etc/hosts") == "/etc"
    assert mount_conflict("/tmp") == "/tmp" and mount_conflict("/home") == "/home/node"


def test_the_plan_refuses_a_node_path_of_the_nodes_own_naming_another(make_job, tmp_path):
    with pytest.raises(UsageError, match=r"^--mount .*/data:/shared/x: /shared/x in the nodes collides with their own"
                                         r" /shared; give it another node path, e.g. --mount .*/data:/data/data$"):
        (tmp_path / "data").mkdir()
        make_job(mounts=(parse_mount(f"{tmp_path / 'data'}:/shared/x"),))


def test_every_node_binds_each_mount_and_the_plan_shows_them(make_job, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "ckpt").mkdir()
    plan = make_job(nodes=2, mounts=(parse_mount(f"{tmp_path / 'data'}:/data:ro"), parse_mount(str(tmp_path / "ckpt"))))
    expected = [{"type": "bind", "source": str(tmp_path / "data"), "target": "/data", "read_only": True},
                {"type": "bind", "source": str(tmp_path / "ckpt"), "target": str(tmp_path / "ckpt")}]
    services = render_compose(plan)["services"]
    for name in ("node0", "node1"):
        assert services[name]["volumes"][-2:] == expected
    slurm = render_slurm_compose(plan, "ddp-compose-slurm:abc", "1000:1000")["services"]
    assert all(service["volumes"][-2:] == expected for service in slurm.values())
    shown = format_plan(plan).splitlines()
    assert f"mount {tmp_path / 'data'} -> /data (read-only)" in shown
    assert f"mount {tmp_path / 'ckpt'} -> {tmp_path / 'ckpt'}" in shown


def test_the_command_line_refuses_a_bad_mount_in_one_line_and_the_library_parses_text(tmp_path, capsys):
    out = io.StringIO()
    code = main(["run", "--workdir", str(tmp_path), "--mount", str(tmp_path / "missing"), "--dry-run"], out=out)
    said = capsys.readouterr().err.strip().splitlines() + out.getvalue().strip().splitlines()
    assert code == 2 and said == [f"error: --mount {tmp_path / 'missing'}: '{tmp_path / 'missing'}' does not exist"
                                  " on this host"], said
    request = RunRequest.from_options(mounts=["/data:/d:ro"])  # the plugin's and the library's way
    assert request.mounts == (Mount(Path("/data"), "/d", read_only=True),)
