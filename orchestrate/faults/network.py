"""A split network: two groups of a run's nodes that cannot reach each other, each group
keeping its own links (``partition``).

The plan is pure (:func:`partition_routes`): every node of one group gets a blackhole route
to the address of every node of the other, so what it sends there is dropped without a word,
as on a real split; the nodes of its own group it reaches as before. Doing it is an exec of
``ip route`` as root in each node (which needs NET_ADMIN: a run with a ``partition`` fault has
it), and healing it deletes the same routes. A node restarted while the network is split comes
back whole: its container's network namespace is new.
"""
from __future__ import annotations

from typing import Any

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import engine_errors
from orchestrate.engine.labels import project_network
from orchestrate.errors import EngineError, NodeLookupError


def partition_routes(groups: tuple[tuple[str, ...], ...], addresses: dict[str, str]) -> dict[str, list[str]]:
    """The addresses each node must no longer reach (pure): those of the other group's nodes.

    Raises:
        NodeLookupError: When a node of either group has no address (it is not running).
    """
    missing = [n for group in groups for n in group if not addresses.get(n)]
    if missing:
        raise NodeLookupError(f"{', '.join(missing)} not running on the run's network")
    first, second = groups
    cut = {node: [addresses[other] for other in second] for node in first}
    cut.update({node: [addresses[other] for other in first] for node in second})
    return cut


def route_commands(addresses: list[str], add: bool) -> list[list[str]]:
    """The ``ip route`` commands that cut (``add``) or restore the way to ``addresses``."""
    return [["ip", "route", "add" if add else "del", "blackhole", f"{address}/32"] for address in addresses]


def node_addresses(client: Any, project: str, containers: dict[str, Any]) -> dict[str, str]:
    """Each running node's address on the run's network."""
    network = project_network(client, project).name
    addresses = {}
    for name, container in containers.items():
        container.reload()
        networks = container.attrs.get("NetworkSettings", {}).get("Networks", {}) or {}
        address = (networks.get(network) or {}).get("IPAddress", "")
        if address:
            addresses[name] = address
    return addresses


def split(client: Any, project: str, containers: dict[str, Any], groups: tuple[tuple[str, ...], ...]) -> dict[str, list[str]]:
    """Split the run's network between ``groups``; return what was cut in each node (for
    :func:`heal`). A node that cannot be cut leaves the split undone where it was done.

    Raises:
        NodeLookupError: When a node of a group is not running.
        EngineError: When a node refused the routes (quoting ``ip``).
    """
    cut = partition_routes(groups, node_addresses(client, project, containers))
    done: dict[str, list[str]] = {}
    try:
        for node, addresses in cut.items():
            done[node] = addresses  # healed on a failure even when cut part way
            _run(client, containers[node], route_commands(addresses, add=True))
    except (*engine_errors(), EngineError):
        heal(client, containers, done)
        raise
    return cut


def heal(client: Any, containers: dict[str, Any], cut: dict[str, list[str]]) -> list[str]:
    """Delete the routes :func:`split` added; return the nodes that could not be healed (ended or
    restarted meanwhile: nothing is left to delete there)."""
    unhealed = []
    for node, addresses in cut.items():
        if node not in containers:
            unhealed.append(node)
            continue
        for command in route_commands(addresses, add=False):
            try:
                code, _ = exec_output(client, containers[node], command, user="0:0")
            except engine_errors():  # it ended or is restarting: its routes went with it
                code = -1
            if code != 0 and node not in unhealed:
                unhealed.append(node)
    return unhealed


def _run(client: Any, container: Any, commands: list[list[str]]) -> None:
    for command in commands:
        code, output = exec_output(client, container, command, user="0:0")
        if code != 0:
            hint = (" (the run's nodes lack NET_ADMIN: only runs started with a partition fault, --link or a"
                    " degrade fault have it)") if "not permitted" in output else ""
            raise EngineError(f"cannot split the network at {getattr(container, 'name', 'a node')}"
                              f" ({' '.join(command)}): {output.strip()[-200:]}{hint}")
