"""What a killed command leaves in the engine with nobody to remove it: a run's network and volume
with no container, and an image build's wheel server.

Compose makes a run's network and volume before its node containers, and removes them after. A
launcher killed in between (SIGKILL, a CI worker ended, a host that went down) leaves them with no
container to carry the run's record, so :func:`orchestrate.engine.runs.list_runs` cannot see them.
They carry the run's id, directory, launcher and owner themselves
(:func:`orchestrate.engine.labels.project_labels`); a network or volume of a run made before they
did is known by its Compose project's name alone (``ddp-<run id>``). ``ps`` names them, and
``down RUN`` and ``prune`` remove them. :func:`left_behind` is the pure rule that tells them from
a run being made or removed this moment.

An offline image build serves the host's wheels from a container on a network of its own
(:func:`orchestrate.engine.images.wheel_server`) and removes both as it ends; a build killed
meanwhile leaves the server running. Both carry the build's launcher and owner
(:data:`WHEEL_SERVER_LABEL`): the next build of the same user, and ``prune``, remove those whose
launcher is gone (:func:`list_wheel_servers_left`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from orchestrate.engine.client import engine_now, engine_time
from orchestrate.engine.labels import COMPOSE_PROJECT_LABEL, LAUNCHER_LABEL, RUN_DIR_LABEL, RUN_ID_LABEL
from orchestrate.engine.runs import launcher_alive
from orchestrate.errors import EngineError, UsageError
from orchestrate.text import runs_named, several_runs

# The label of an image build's wheel server, container and network: the server's name
WHEEL_SERVER_LABEL = "io.ddp-compose.wheel-server"
# A run's Compose project: ``ddp-`` and its id (``20261207-195737-5c1e0a``, see launch.run.new_run_id)
RUN_PROJECT = re.compile(r"ddp-(\d{8}-\d{6}-[0-9a-f]{6})")
# A network or volume whose launcher cannot be asked (it ran on another host, or it was made before
# they were labelled with it) counts as left behind this long after the engine made it: Compose
# makes the nodes within seconds of their network, even on a loaded host.
UNKNOWN_LAUNCHER_GRACE_S = 300.0


@dataclass(frozen=True)
class RunRemains:
    """A run's networks and volumes with no container of the run beside them.

    Attributes:
        run_id: The run's id, from its label or its project's name.
        project: Its Compose project.
        networks: The names of its networks.
        volumes: The names of its volumes.
        labels: The labels of the first of them (a run made before they were labelled has only
            Compose's).
    """

    run_id: str
    project: str
    networks: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        """The run's directory ("" where its labels do not say)."""
        return Path(self.labels.get(RUN_DIR_LABEL, ""))

    @property
    def them(self) -> str:
        """``it`` for one network or volume, ``them`` for more."""
        return "it" if len(self.networks) + len(self.volumes) == 1 else "them"

    @property
    def parts(self) -> tuple[tuple[str, str], ...]:
        """Each network and volume as ``(kind, name)``, in the order they are removed."""
        return (*(("network", n) for n in self.networks), *(("volume", v) for v in self.volumes))

    @property
    def what(self) -> str:
        """What it is, for an error: ``what run X left``."""
        return f"what run {self.run_id} left"

    @property
    def described(self) -> str:
        """``network ddp-X_ddp, volume ddp-X_shared``."""
        return described(self.parts)


def described(parts: tuple[tuple[str, str], ...]) -> str:
    """``network X, volume Y``: each ``(kind, name)`` said."""
    return ", ".join(f"{kind} {name}" for kind, name in parts)


def left_behind(launcher_is_alive: Optional[bool], age_s: Optional[float]) -> bool:
    """Whether a run's network or volume with no container is left behind (pure), rather than
    being made (its nodes come next) or removed (they went first) this moment: its launcher is
    known to be gone, or it cannot be asked and the engine made them
    ``UNKNOWN_LAUNCHER_GRACE_S`` ago or more. A live launcher is still at work on them."""
    if launcher_is_alive is not None:
        return not launcher_is_alive
    return age_s is not None and age_s >= UNKNOWN_LAUNCHER_GRACE_S


def left_since(labels: dict[str, str], items: list[Any], now: float) -> bool:
    """Whether the items one command made (a run's network and volume, a build's wheel server),
    whose first's ``labels`` name its launcher, are left behind at ``now`` (the engine's clock):
    :func:`left_behind`, by that launcher and by the earliest time the engine made one of them."""
    made = min((engine_time(made_at(item)) or now for item in items), default=now)
    return left_behind(launcher_alive(labels.get(LAUNCHER_LABEL, "")), now - made)


def list_remains(client: Any) -> list[RunRemains]:
    """Every run's networks and volumes that no container of the run stands beside and that
    :func:`left_behind` says were left, newest run first.

    The networks and volumes are listed before the containers: a run made meanwhile has its
    containers listed too. One removed meanwhile is left out where the next listing misses it.

    Raises:
        EngineError: When the engine cannot list them.
    """
    import docker.errors

    label = {"label": COMPOSE_PROJECT_LABEL}
    try:
        networks = client.networks.list(filters=label)
        volumes = client.volumes.list(filters=label)
        with_containers = {c.labels.get(COMPOSE_PROJECT_LABEL)
                           for c in client.containers.list(all=True, ignore_removed=True, filters=label)}
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot list what runs left: {exc.explanation or exc}") from None
    by_project: dict[str, list[tuple[str, Any]]] = {}
    for kind, found in (("network", networks), ("volume", volumes)):
        for item in found:
            project = (item.attrs.get("Labels") or {}).get(COMPOSE_PROJECT_LABEL, "")
            if RUN_PROJECT.fullmatch(project) and project not in with_containers:
                by_project.setdefault(project, []).append((kind, item))
    if not by_project:
        return []
    now = engine_now(client)
    remains = []
    for project, items in by_project.items():
        labels = dict(items[0][1].attrs.get("Labels") or {})
        if not left_since(labels, [item for _, item in items], now):
            continue
        run_id = labels.get(RUN_ID_LABEL) or RUN_PROJECT.fullmatch(project).group(1)
        remains.append(RunRemains(run_id, project, tuple(sorted(i.name for k, i in items if k == "network")),
                                  tuple(sorted(i.name for k, i in items if k == "volume")), labels))
    return sorted(remains, key=lambda r: r.run_id, reverse=True)


def remains_named(run_id: str, remains: list[RunRemains]) -> Optional[RunRemains]:
    """The one of ``remains`` whose run ``run_id`` names (its whole id, or a unique start or end of
    it, as a run's), None where it names none.

    Raises:
        UsageError: When it names several.
    """
    by_id = {r.run_id: r for r in remains}
    matches = runs_named(run_id, by_id)
    if len(matches) > 1:
        raise UsageError(several_runs(run_id, matches, "among the runs that left a network or volume"))
    return by_id[matches[0]] if matches else None


def made_at(item: Any) -> str:
    """When the engine made a network (``Created``) or volume (``CreatedAt``)."""
    return str(item.attrs.get("Created") or item.attrs.get("CreatedAt") or "")


def remove_left(client: Any, left: Union[RunRemains, "WheelServerLeft"]) -> list[str]:
    """Remove what a killed command left (:attr:`RunRemains.parts`, :attr:`WheelServerLeft.parts`),
    in its order; what another command removed first is gone all the same.

    Returns:
        What this call removed, one line each.

    Raises:
        EngineError: When the engine refuses to remove one.
    """
    import docker.errors

    collections = {"container": client.containers, "network": client.networks, "volume": client.volumes}
    removed = []
    try:
        for kind, name in left.parts:
            try:
                item = collections[kind].get(name)
                item.remove() if kind == "network" else item.remove(force=True)  # (a network takes no force)
            except docker.errors.NotFound:
                continue
            removed.append(f"{kind} {name}")
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot remove {left.what}: {exc.explanation or exc}") from None
    return removed


@dataclass(frozen=True)
class WheelServerLeft:
    """An image build's wheel server whose build was killed: its container and network.

    Attributes:
        name: The server's name (its container's and its network's).
        containers: Its container, where it is still there.
        networks: Its network, where it is still there.
        labels: The labels of the first of them.
    """

    name: str
    containers: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        """None: a build is no run of a project (``--runs-dir`` never names it)."""
        return Path("")

    @property
    def parts(self) -> tuple[tuple[str, str], ...]:
        """Its container and network as ``(kind, name)``, the container first (the network goes
        only once nothing is on it)."""
        return (*(("container", c) for c in self.containers), *(("network", n) for n in self.networks))

    @property
    def what(self) -> str:
        """What it is, for an error."""
        return f"the wheel server {self.name}"

    @property
    def described(self) -> str:
        """``container X, network X``."""
        return described(self.parts)


def list_wheel_servers_left(client: Any) -> list[WheelServerLeft]:
    """Every image build's wheel server whose build :func:`left_behind` says is gone (a server made
    before its launcher was labelled counts once it is ``UNKNOWN_LAUNCHER_GRACE_S`` old).

    Raises:
        EngineError: When the engine cannot list them.
    """
    import docker.errors

    label = {"label": WHEEL_SERVER_LABEL}
    try:
        containers = client.containers.list(all=True, ignore_removed=True, filters=label)
        networks = client.networks.list(filters=label)
    except docker.errors.APIError as exc:
        raise EngineError(f"cannot list the image builds' wheel servers: {exc.explanation or exc}") from None
    by_name: dict[str, list[tuple[str, Any, dict[str, str]]]] = {}
    for container in containers:
        by_name.setdefault(container.labels.get(WHEEL_SERVER_LABEL, ""), []).append(
            ("container", container, dict(container.labels)))
    for network in networks:
        labels = dict(network.attrs.get("Labels") or {})
        by_name.setdefault(labels.get(WHEEL_SERVER_LABEL, ""), []).append(("network", network, labels))
    if not by_name:
        return []
    now = engine_now(client)
    left = []
    for name, items in sorted(by_name.items()):
        labels = items[0][2]
        if not left_since(labels, [item for _, item, _ in items], now):
            continue
        left.append(WheelServerLeft(name, tuple(i.name for k, i, _ in items if k == "container"),
                                    tuple(i.name for k, i, _ in items if k == "network"), labels))
    return left
