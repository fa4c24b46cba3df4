"""The network of a run's nodes, changed from inside them: commands run as root in a node
(:func:`as_root`, which ``tc`` shaping and iptables loss use too), and a split network: two
groups of nodes that cannot reach each other, each group keeping its own links (``partition``).

The split's plan is pure (:func:`partition_routes`): every node of one group gets a blackhole
route to the address of every node of the other, so what it sends there is dropped without a
word, as on a real split; the nodes of its own group it reaches as before. Doing it is an exec
of ``ip route`` as root in each node (which needs NET_ADMIN: a run with a ``partition`` fault
has it). Healing it flushes every blackhole route the nodes hold (:data:`FLUSH_BLACKHOLES_ARGV`), so
it needs no record of the split; a node restarted meanwhile holds none: its container's network
namespace is new.
"""
from __future__ import annotations

from typing import Any

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import EngineFault, classify, describe, engine_errors
from orchestrate.engine.labels import project_network
from orchestrate.errors import EngineError, NodeLookupError


def as_root(client: Any, container: Any, commands: list[list[str]], what: str) -> None:
    """Run ``commands`` in a node as root, one by one (``what``: what they do, for the error).

    Raises:
        EngineError: Quoting the command that failed, and saying when the node lacks NET_ADMIN.
    """
    for command in commands:
        code, output = exec_output(client, container, command, user="0:0")
        if code != 0:
            hint = (" (the run's nodes lack NET_ADMIN: only runs started with --link or a degrade, lossy or"
                    " partition fault have it)") if lacks_net_admin(output) else ""
            raise EngineError(f"cannot {what} at {container.name} ({' '.join(command)}):"
                              f" {output.strip()[-200:]}{hint}")


def lacks_net_admin(output: str) -> bool:
    """Whether a network command's refusal is the node's missing NET_ADMIN (pure): ``ip`` and
    ``tc`` say "Operation not permitted"; iptables, run as root all the same, "Permission denied
    (you must be root)"."""
    return "not permitted" in output or "Permission denied" in output


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


# Every blackhole route of a node in one command, listing none first: docker's exec can lose a
# short command's output (docker/docker-py#2042), and a heal that read an empty listing would
# have left the network split. A node's routes are its own: it holds no other blackholes.
FLUSH_BLACKHOLES_ARGV = ["ip", "route", "flush", "type", "blackhole"]


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


def split(client: Any, project: str, containers: dict[str, Any], groups: tuple[tuple[str, ...], ...]) -> None:
    """Split the run's network between ``groups``. A split that fails part way is undone on the
    nodes that got routes, and the refusal raised (a node that refused its first route holds none).

    Raises:
        NodeLookupError: When a node of a group is not running.
        EngineError: When a node refused the routes (quoting ``ip``), or undoing a split that
            failed part way failed too (saying both).
    """
    cut = partition_routes(groups, node_addresses(client, project, containers))
    routed: set[str] = set()  # the nodes that hold a route of this split
    try:
        for node, addresses in cut.items():
            for command in route_commands(addresses, add=True):
                as_root(client, containers[node], [command], "split the network")
                routed.add(node)
    except (*engine_errors(), EngineError) as refused:
        try:
            heal(client, {node: containers[node] for node in routed}, groups)
        except (*engine_errors(), EngineError) as exc:
            raise EngineError(f"{describe(refused)}; undoing the routes already added failed too: {describe(exc)}"
                              ) from refused
        raise


def heal(client: Any, containers: dict[str, Any], groups: tuple[tuple[str, ...], ...]) -> None:
    """Delete the blackhole routes of every node of ``groups`` that still runs; one that ended
    or is restarting holds none (its routes went with its network namespace). A node that refuses
    stops no other from being healed.

    Raises:
        EngineError: The first refusal of a running node (quoting ``ip``), once every node was tried.
    """
    refused: list[BaseException] = []
    for node in (n for group in groups for n in group if n in containers):
        try:
            as_root(client, containers[node], [FLUSH_BLACKHOLES_ARGV], "heal the network")
        except engine_errors() as exc:
            if classify(exc) not in (EngineFault.CONFLICT, EngineFault.NOT_FOUND):
                refused.append(exc)
        except EngineError as exc:
            refused.append(exc)
    if refused:
        raise refused[0]
