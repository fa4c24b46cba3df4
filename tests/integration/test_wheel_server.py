"""An image build killed while its wheel server runs leaves the server running; the user's next
build removes it first, and says so (the real engine, the node image's python3 as the server)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.engine.images import wheel_server
from orchestrate.engine.remains import WHEEL_SERVER_LABEL
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration

# A build's process that enters the wheel server, says its name, and is killed before its end.
KILLED_BUILD = textwrap.dedent("""
    import os, signal, sys
    import docker
    from orchestrate.engine.images import wheel_server
    with wheel_server(docker.from_env(), __import__("pathlib").Path(sys.argv[1]), sys.argv[2]) as server:
        print(server.network, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
""")


def servers_named(client, name: str) -> list[str]:
    """The containers and networks of the wheel server ``name`` still in the engine."""
    label = {"label": f"{WHEEL_SERVER_LABEL}={name}"}
    return ([f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters=label)]
            + [f"network {n.name}" for n in client.networks.list(filters=label)])


def test_the_next_build_removes_the_wheel_server_a_killed_build_left_running(docker_client, tmp_path):
    killed = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(tmp_path), DEFAULT_IMAGE], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    name = killed.stdout.strip()
    try:
        assert killed.returncode == -9 and name.startswith("ddp-compose-wheels-"), killed.stderr[-2000:]
        assert servers_named(docker_client, name) == [f"container {name}", f"network {name}"]
        assert docker_client.containers.get(name).status == "running"  # left serving, nobody to stop it
        said: list[str] = []
        with wheel_server(docker_client, tmp_path, DEFAULT_IMAGE, said.append) as server:
            assert servers_named(docker_client, name) == []
            assert servers_named(docker_client, server.network) == [f"container {server.network}",
                                                                      f"network {server.network}"]
        assert said == [f"removed the wheel server of an earlier build that was killed: container {name},"
                        f" network {name}"]
        assert servers_named(docker_client, server.network) == []  # its own, removed at its end
    finally:
        for container in docker_client.containers.list(all=True, ignore_removed=True,
                                                       filters={"label": f"{WHEEL_SERVER_LABEL}={name}"}):
            container.remove(force=True)
        for network in docker_client.networks.list(filters={"label": f"{WHEEL_SERVER_LABEL}={name}"}):
            network.remove()
