"""Words of an error that a peer's loss caused, not the rank's own: a closed connection, an
aborted communicator, a lost rendezvous. The launcher takes such a failure as a consequence of
another rank's (:mod:`orchestrate.outcome.root_cause`); a worker run with ``--pdb`` gives it no
post-mortem (:mod:`orchestrate.node.remote_debugger`). Standard library only."""
from __future__ import annotations

LOST_PEER_MARKERS = (
    "Connection closed by peer",
    "remote worker crashing",
    "Connection reset by peer",
    "SIGTERM",
    "SIGKILL",
    # NCCL's watchdog aborts the process on a peer that left, an error or a timeout elsewhere
    "Process group watchdog thread terminated",
    "remote process exited",
    "communicator was aborted",
    # torch's check of each collective (TORCH_DISTRIBUTED_DEBUG=DETAIL) on a peer that is not
    # there: gone (it says so at once, naming its full timeout), or waiting elsewhere
    "failed to pass monitoredBarrier",
    # gloo could not reach a peer as the process group formed: it is gone, or starts again
    "connectFullMesh failed",
    # torchrun's agent lost the rendezvous store: the node that held it died or restarted
    "RendezvousConnectionError",
)


def says_a_peer_was_lost(text: str) -> bool:
    """Whether an error's text (or a worker's last lines) says a peer, or the rendezvous store,
    was lost."""
    return any(marker in text for marker in LOST_PEER_MARKERS)
