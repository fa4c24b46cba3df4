"""Which nodes can this one reach? Each worker (one per node) listens on a port, and every
half second tries to connect to every other node's host name on it, printing the nodes it
reached: ``rank R at T s reaches node1,node3``. Plain Python under torchrun: no process group,
so a split network stops nothing but the connections it cuts."""
import argparse
import os
import socket
import threading
import time

PORT = 29731

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=20.0)
args = parser.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
me = socket.gethostname()

listener = socket.create_server(("", PORT))
threading.Thread(target=lambda: [listener.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()


def reaches(host: str) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=0.5):
            return True
    except OSError:
        return False


peers = [f"node{i}" for i in range(world) if f"node{i}" != me]
started = time.monotonic()
while time.monotonic() - started < args.seconds:
    reached = [peer for peer in peers if reaches(peer)]
    print(f"rank {rank} at {time.monotonic() - started:.1f} s reaches {','.join(reached) or '-'}", flush=True)
    time.sleep(0.5)
