"""A node's main process: wait for the peers, run torchrun, end with its exit code.

    python3 orchestrate/node/main.py --peers node0,node1 --ready-timeout 60 \
        [--lease FILE --lease-timeout 30 --stop-grace 10] [--tc "COMMAND" --run-as UID:GID] -- torchrun ...

It runs inside the node container under ``init`` (standard library only, any Python 3.8+),
so the engine owns what matters: the container's exit code is torchrun's, its log is
torchrun's output, and restarting the container restarts torchrun.

1. With ``--tc "COMMAND"`` (a shaped link, see ``orchestrate/config/link.py``): run each traffic-
   control command (as root, with NET_ADMIN), and later start torchrun as ``--run-as UID:GID``;
   exit :data:`EXIT_SHAPING_FAILED` when one fails.
2. Wait until every peer's name resolves (Compose starts the containers in parallel), at most
   ``--ready-timeout`` seconds; exit :data:`EXIT_PEERS_UNREACHABLE` when one never does.
3. Start torchrun in a process group of its own; pass SIGTERM/SIGINT/SIGHUP on to that group.
   Whoever sent the signal decides when to SIGKILL (``docker stop``'s timeout, the launcher's
   stop grace), so a ``stop --timeout 60`` gives the workers their 60 s.
4. With ``--lease FILE`` (a foreground run), watch the launcher's heartbeat: the launcher
   rewrites FILE every few seconds; when its content has not changed for ``--lease-timeout``
   seconds of this node's own clock, the launcher is gone, and the node stops torchrun
   (SIGTERM, then SIGKILL ``--stop-grace`` seconds later: here no one else will) and exits
   with :data:`EXIT_LAUNCHER_GONE`. A detached run has no lease.
5. Exit with torchrun's exit code, or 128 + the signal that ended it; a node stopped from
   outside (``docker stop``: SIGTERM) exits 128 + that signal, whatever torchrun made of it.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

# EX_TEMPFAIL: the run lost its launcher; ``ps`` shows such runs as orphaned.
EXIT_LAUNCHER_GONE = 75
EXIT_PEERS_UNREACHABLE = 69  # EX_UNAVAILABLE
EXIT_SHAPING_FAILED = 71  # EX_OSERR
LEASE_POLL_S = 1.0


def say(text: str) -> None:
    print(f"[ddp-compose] {text}", flush=True)


def wait_for_peers(peers: List[str], timeout_s: float) -> List[str]:
    """Poll until every peer name resolves; return those that still do not at the deadline."""
    deadline = time.monotonic() + timeout_s
    pending = list(peers)
    while pending:
        for name in list(pending):
            try:
                socket.getaddrinfo(name, None)
                pending.remove(name)
            except socket.gaierror:
                pass
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.05)  # a peer's name appears within a second of its start: poll often
    return pending


def read_lease(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


class Node:
    """torchrun as a child in its own process group, with the signal and lease handling."""

    def __init__(self, argv: List[str], stop_grace_s: Optional[float], run_as: Optional[str] = None) -> None:
        self.argv = argv
        self.stop_grace_s = stop_grace_s
        self.run_as = run_as
        self.child: Optional[subprocess.Popen] = None
        self.stop_requested_at: Optional[float] = None
        self.stop_signal = signal.SIGTERM
        self.stop_reason = 0
        self.kill_after_grace = False  # only when this node stops itself

    def start(self) -> None:
        self.child = subprocess.Popen(self.argv, start_new_session=True, preexec_fn=self._drop_privileges)
        if self.stop_requested_at is not None:  # a stop that came while the child was being started
            self.signal_group(self.stop_signal)

    def _drop_privileges(self) -> None:
        """In the child, before exec: become the user (the shaping needed root, torchrun does not)."""
        if not self.run_as:
            return
        uid, gid = (int(x) for x in self.run_as.split(":"))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    def signal_group(self, signum: int) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        try:
            os.killpg(self.child.pid, signum)
        except ProcessLookupError:
            pass

    def request_stop(self, signum: int, reason: int, kill_after_grace: bool = False) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            self.stop_signal = signum
            self.stop_reason = reason
            self.kill_after_grace = kill_after_grace
            self.signal_group(signum)

    def on_signal(self, signum: int, frame: object) -> None:
        self.request_stop(signum, 128 + signum)

    def wait(self, lease: Optional[str], lease_timeout_s: float) -> int:
        """Wait for torchrun; enforce the stop grace and the launcher lease."""
        assert self.child is not None
        last_lease = read_lease(lease) if lease else None
        lease_changed_at = time.monotonic()
        while True:
            try:
                code = self.child.wait(timeout=LEASE_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if (self.stop_requested_at is not None and self.kill_after_grace and self.stop_grace_s is not None
                    and now - self.stop_requested_at > self.stop_grace_s):
                self.signal_group(signal.SIGKILL)
            if lease is None or self.stop_requested_at is not None:
                continue
            current = read_lease(lease)
            if current != last_lease:
                last_lease, lease_changed_at = current, now
            elif now - lease_changed_at > lease_timeout_s:
                say(f"the launcher is gone (no heartbeat for {lease_timeout_s:g} s): stopping this node")
                self.request_stop(signal.SIGTERM, EXIT_LAUNCHER_GONE, kill_after_grace=True)
        if self.stop_reason:  # stopped from outside (or by the lease): say so, not torchrun's code
            return self.stop_reason
        return code if code >= 0 else 128 - code


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="node_main", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default="", help="comma-separated names of every node of the run")
    parser.add_argument("--ready-timeout", type=float, required=True, help="seconds to wait for the peers")
    parser.add_argument("--lease", default=None, help="the launcher's heartbeat file (foreground runs)")
    parser.add_argument("--lease-timeout", type=float, default=None,
                        help="seconds without a heartbeat (required with --lease)")
    parser.add_argument("--stop-grace", type=float, default=None,
                        help="seconds from SIGTERM to SIGKILL when the node stops itself, its launcher gone"
                             " (required with --lease)")
    parser.add_argument("--tc", action="append", default=[], metavar="COMMAND",
                        help="a traffic-control command shaping this node's link (repeatable)")
    parser.add_argument("--run-as", default=None, metavar="UID:GID", help="run torchrun as this user")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- torchrun ...")
    args = parser.parse_args(argv)
    if args.lease and (args.lease_timeout is None or args.stop_grace is None):
        parser.error("--lease needs --lease-timeout and --stop-grace (the launcher gives both)")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")

    for tc in args.tc:
        shaped = subprocess.run(shlex.split(tc), capture_output=True, text=True)
        if shaped.returncode != 0:
            say(f"cannot shape the link ({tc}): {shaped.stderr.strip() or shaped.returncode}")
            return EXIT_SHAPING_FAILED
        say(f"link shaped: {tc}")
    node = Node(command, args.stop_grace, args.run_as)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, node.on_signal)
    peers = [p for p in args.peers.split(",") if p]
    missing = wait_for_peers(peers, args.ready_timeout)
    if missing:
        say(f"peers {', '.join(missing)} do not resolve after {args.ready_timeout:g} s: not starting torchrun")
        return EXIT_PEERS_UNREACHABLE
    if node.stop_requested_at is not None:
        return node.stop_reason
    node.start()
    return node.wait(args.lease, args.lease_timeout)


if __name__ == "__main__":
    sys.exit(main())
