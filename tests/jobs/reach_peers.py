"""Which nodes can this one reach? Each worker (one per node) listens on a port, and every
half second tries to connect to every other node's host name on it, printing the nodes it
reached: ``rank R at T s reaches node1,node3``, for ``--seconds``, or with ``--until FILE`` until
that file appears in the working directory and 6 tries more (``--seconds`` then caps it). Plain
Python under torchrun: no process group, so a split network stops nothing but the connections it
cuts.

Workers start apart, so each, once its own tries are over, tells every peer it is done and
listens on until every peer has told it the same: a peer's last tries never meet a closed port."""
import argparse
import os
import socket
import threading
import time

PORT = 29731

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=20.0)
parser.add_argument("--until", default="", help="try until this file exists, then 6 tries more")
args = parser.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
me = socket.gethostname()
peers = [f"node{i}" for i in range(world) if f"node{i}" != me]
peers_done: set[str] = set()


def listen(listener: socket.socket) -> None:
    while True:
        connection = listener.accept()[0]
        with connection:
            connection.settimeout(2.0)
            try:
                said = connection.recv(64).decode()
            except OSError:
                continue
            if said.startswith("done:"):
                peers_done.add(said.removeprefix("done:"))


threading.Thread(target=listen, args=(socket.create_server(("", PORT)),), daemon=True).start()


def reaches(host: str) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=0.5):
            return True
    except OSError:
        return False


def tell_done(host: str) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=0.5) as connection:
            connection.sendall(f"done:{me}".encode())
            return True
    except OSError:
        return False


started, tries_left = time.monotonic(), 6
while time.monotonic() - started < args.seconds and tries_left > 0:
    if args.until and os.path.exists(args.until):
        tries_left -= 1
    reached = [peer for peer in peers if reaches(peer)]
    print(f"rank {rank} at {time.monotonic() - started:.1f} s reaches {','.join(reached) or '-'}", flush=True)
    time.sleep(0.5)

untold, deadline = set(peers), time.monotonic() + 60
while (untold or peers_done != set(peers)) and time.monotonic() < deadline:
    untold -= {peer for peer in untold if tell_done(peer)}
    time.sleep(0.2)
print(f"rank {rank} done; peers done: {','.join(sorted(peers_done)) or '-'}", flush=True)
