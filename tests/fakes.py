"""The one fake Docker client (and fake Compose project) of the unit tests.

It records every call it receives, so tests assert on what the launcher asked of Docker.
A node's torchrun is scripted as lines to print and an exit code.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class ScriptedExec:
    """What torchrun "prints" and returns on one node; ``hang`` blocks until killed."""

    lines: list[str] = field(default_factory=list)
    exit_code: int = 0
    hang: bool = False


class FakeContainer:
    def __init__(self, client: "FakeDockerClient", name: str, labels: dict[str, str]) -> None:
        self.client = client
        self.id = f"id-{name}"
        self.name = name
        self.labels = labels
        self.killed = threading.Event()
        self.status = "running"
        self.paused = False
        self.networks = {f"{labels['com.docker.compose.project']}_ddp": {}}

    @property
    def attrs(self) -> dict:
        return {"State": {"Running": self.status == "running", "Paused": self.paused},
                "NetworkSettings": {"Networks": self.networks}}

    def reload(self) -> None:
        self.client.calls.append(("reload", self.name))

    def kill(self) -> None:
        self.client.calls.append(("kill", self.name))
        self.killed.set()
        self.status = "exited"

    def pause(self) -> None:
        self.client.calls.append(("pause", self.name))
        self.paused = True

    def restart(self, timeout: int = 10) -> None:
        self.client.calls.append(("restart", self.name))
        self.killed.set()  # what ran in it dies; what is started afterwards does not
        self.killed = threading.Event()
        self.status = "running"


class FakeNetwork:
    def __init__(self, client: "FakeDockerClient", name: str) -> None:
        self.client = client
        self.name = name

    def disconnect(self, container: FakeContainer, force: bool = False) -> None:
        self.client.calls.append(("disconnect", container.name, self.name))
        container.networks.pop(self.name, None)


class FakeNetworks:
    def __init__(self, client: "FakeDockerClient") -> None:
        self.client = client

    def list(self, filters: Optional[dict] = None) -> list[FakeNetwork]:
        wanted = dict(item.partition("=")[::2] for item in (filters or {}).get("label", []))
        project = wanted.get("com.docker.compose.project")
        return [FakeNetwork(self.client, f"{project}_{wanted.get('com.docker.compose.network')}")]


class FakeContainers:
    def __init__(self, client: "FakeDockerClient") -> None:
        self.client = client

    def list(self, all: bool = False, filters: Optional[dict] = None) -> list[FakeContainer]:
        self.client.calls.append(("containers.list", tuple((filters or {}).get("label", ()))))
        wanted = (filters or {}).get("label", [])
        return [
            c for c in self.client.containers_by_name.values()
            if all_labels_match(c.labels, wanted)
        ]


def all_labels_match(labels: dict[str, str], wanted: list[str]) -> bool:
    for item in wanted:
        key, _, value = item.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeAPI:
    def __init__(self, client: "FakeDockerClient") -> None:
        self.client = client
        # exec id -> (container, argv, kwargs, its script, the container's kill event then)
        self.execs: dict[str, tuple] = {}

    def exec_create(self, container_id: str, cmd: list[str], **kwargs) -> dict:
        container = next(c for c in self.client.containers_by_name.values() if c.id == container_id)
        exec_id = f"exec-{len(self.execs)}"
        script = None
        if cmd[0] not in ("getent", *self.client.command_outputs) and not self.client.output_for(container.name, cmd):
            script = self.client.next_script(container.name)
        self.execs[exec_id] = (container, list(cmd), kwargs, script, container.killed)
        self.client.calls.append(("exec_create", container.name, tuple(cmd)))
        return {"Id": exec_id}

    def exec_start(self, exec_id: str, stream: bool = False):
        container, cmd, _, script, killed = self.execs[exec_id]
        if cmd[0] == "getent":
            return b"" if stream is False else iter([])
        scripted = self.client.output_for(container.name, cmd)
        if scripted:
            return scripted[1]

        def chunks():
            for line in script.lines:
                yield (line + "\n").encode()
            if script.hang:
                killed.wait(timeout=10)

        return chunks()

    def exec_inspect(self, exec_id: str) -> dict:
        container, cmd, _, script, killed = self.execs[exec_id]
        scripted = self.client.output_for(container.name, cmd)
        if scripted:
            return {"ExitCode": scripted[0]}
        if cmd[0] == "getent":
            resolved = self.client.resolve_after.get(container.name, 0)
            self.client.resolve_after[container.name] = resolved - 1
            return {"ExitCode": 0 if resolved <= 0 else 2}
        if killed.is_set():
            return {"ExitCode": 137}
        return {"ExitCode": script.exit_code}


class FakeImage:
    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.id = f"sha256:{abs(hash(name)):x}"
        self.tags = [name]
        self.labels = labels


class FakeImages:
    """Images by name; a missing one raises the SDK's own ImageNotFound."""

    def __init__(self, client: "FakeDockerClient") -> None:
        self.client = client
        self.by_name: dict[str, FakeImage] = {}

    def add(self, name: str, **labels: str) -> FakeImage:
        self.by_name[name] = FakeImage(name, labels)
        return self.by_name[name]

    def get(self, name: str) -> FakeImage:
        import docker.errors

        self.client.calls.append(("images.get", name))
        if name not in self.by_name:
            raise docker.errors.ImageNotFound(f"No such image: {name}")
        return self.by_name[name]

    def pull(self, name: str) -> FakeImage:
        """Succeeds only for names in ``pullable``, else fails like an unreachable registry."""
        import docker.errors

        self.client.calls.append(("images.pull", name))
        if name not in self.pullable:
            raise docker.errors.APIError(f"pull access denied for {name}", explanation=f"dial tcp: lookup registry: no such host")
        return self.add(name)

    pullable: set = set()


class FakeDockerClient:
    """A Docker SDK client double: ``containers``, ``api`` and a call log."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.containers_by_name: dict[str, FakeContainer] = {}
        self.scripts: dict[str, ScriptedExec] = {}
        # node -> how many getent checks fail before it resolves its peers
        self.resolve_after: dict[str, int] = {}
        # node -> scripts of its relaunches, in order (after its first script)
        self.later_scripts: dict[str, list[ScriptedExec]] = {}
        self.launches: dict[str, int] = {}
        # other commands run with exec: argv[0] -> (exit code, output), or per node:
        # (node, argv[0]) -> (exit code, output)
        self.command_outputs: dict = {}
        self.containers = FakeContainers(self)
        self.networks = FakeNetworks(self)
        self.images = FakeImages(self)
        self.api = FakeAPI(self)

    def output_for(self, node: str, cmd: list[str]) -> Optional[tuple[int, bytes]]:
        return self.command_outputs.get((node, cmd[0])) or self.command_outputs.get(cmd[0])

    def info(self) -> dict:
        return {"NCPU": 2, "MemTotal": 24 * 1024**3, "Runtimes": {"runc": {}}}

    def add_node(self, project: str, name: str, node_rank: int, script: ScriptedExec) -> None:
        self.later_scripts.setdefault(name, [])
        self.containers_by_name[name] = FakeContainer(self, name, {
            "com.docker.compose.project": project,
            "com.docker.compose.service": name,
            "io.ddp-compose.node-rank": str(node_rank),
        })
        self.scripts[name] = script


def _next_script(self: "FakeDockerClient", name: str) -> ScriptedExec:
    launch = self.launches.get(name, 0)
    self.launches[name] = launch + 1
    if launch == 0:
        return self.scripts[name]
    return self.later_scripts[name][launch - 1]


FakeDockerClient.next_script = _next_script


class FakeCompose:
    """Stands in for ComposeProject; on ``up`` it creates the planned nodes in the client."""

    instances: list["FakeCompose"] = []

    fail_down = False

    def __init__(self, project_name: str, compose_file: Path) -> None:
        self.project_name = project_name
        self.compose_file = compose_file
        self.calls: list[str] = []
        FakeCompose.instances.append(self)

    def up(self) -> None:
        self.calls.append("up")

    def down(self) -> None:
        from orchestrate.errors import ComposeError

        self.calls.append("down")
        if FakeCompose.fail_down:
            raise ComposeError(["docker", "compose", "down"], 1, "Error response from daemon: device busy")
