"""A run's own rendezvous store (``--rdzv-store container``): torch's TCPStore, served until the
container is stopped, at the ``--rdzv-endpoint`` every node's torchrun is given, as a real
cluster gives one that outlives any node.

    python3 orchestrate/node/main.py --peers rdzv-store --ready-timeout 60 -- python3 rdzv_store.py PORT

The node supervisor around it holds the launcher's lease, as on every node: the store goes when
the launcher does. torchrun's agents see a host that is not theirs in the endpoint and connect
to it as clients.
"""
from __future__ import annotations

import signal
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: rdzv_store.py PORT", file=sys.stderr)
        return 2
    from torch.distributed import TCPStore

    store = TCPStore("0.0.0.0", int(args[0]), is_master=True, wait_for_workers=False)
    print(f"[ddp-compose] rendezvous store serving on port {args[0]}", flush=True)
    stopped = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    while not stopped:
        signal.pause()
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
