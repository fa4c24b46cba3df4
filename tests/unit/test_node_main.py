"""The node's main process, run for real (it is a plain Python script in every node)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from pathlib import Path

NODE_MAIN = Path(__file__).resolve().parents[2] / "orchestrate" / "node" / "main.py"


def node_main(*args: str) -> subprocess.Popen:
    """The node supervisor as the plan starts it (its --ready-timeout is always given)."""
    given = () if "--ready-timeout" in args else ("--ready-timeout", "60")
    return subprocess.Popen([sys.executable, str(NODE_MAIN), *given, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_the_node_supervisors_settings_are_given_never_defaulted():
    # the launcher's settings have one home (the run's config): the node supervisor takes none of its own
    bare = subprocess.run([sys.executable, str(NODE_MAIN), "--", "true"], capture_output=True, text=True, timeout=30)
    assert bare.returncode == 2 and "--ready-timeout" in bare.stderr
    leased = node_main("--lease", "/nonexistent", "--lease-timeout", "2", "--", "true")
    assert leased.wait(timeout=30) == 2 and "--lease needs --lease-timeout and --stop-grace" in leased.stdout.read()


def test_the_exit_code_is_torchruns_or_128_plus_its_signal():
    assert node_main("--", sys.executable, "-c", "raise SystemExit(7)").wait(timeout=30) == 7
    assert node_main("--", "sh", "-c", "kill -9 $$").wait(timeout=30) == 137


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_sigterm_reaches_the_command_and_ends_the_node_with_143():
    proc = node_main("--", "sleep", "30")
    deadline = time.monotonic() + 30
    while not children_of(proc.pid):  # its command runs: the signal handlers are in place
        assert time.monotonic() < deadline, "the node never started its command"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143


def test_a_stop_that_comes_while_the_command_is_being_started_still_reaches_it():
    from orchestrate.node.main import Node

    # The signal handler can run after the fork, before Popen returns: the child is not yet
    # known, so the stop is only recorded. start() must pass it on once the child is known.
    node = Node(["sleep", "30"], stop_grace_s=1)
    node.on_signal(signal.SIGTERM, None)
    started = time.monotonic()
    node.start()
    assert node.wait(None, 30) == 143
    assert time.monotonic() - started < 10  # the command got the signal, not its own end at 30 s


def test_a_stale_lease_stops_the_node_even_if_the_command_ignores_sigterm(tmp_path):
    lease = tmp_path / "heartbeat"
    lease.write_text("1")
    started = time.monotonic()
    proc = node_main("--lease", str(lease), "--lease-timeout", "2", "--stop-grace", "1", "--",
                     "sh", "-c", "trap '' TERM; sleep 60")
    assert proc.wait(timeout=30) == 75
    took = time.monotonic() - started
    assert 2 <= took < 8, took
    assert "the launcher is gone (no heartbeat for 2 s)" in proc.stdout.read()


def test_a_live_lease_keeps_the_node_running(tmp_path):
    lease = tmp_path / "heartbeat"
    lease.write_text("0")
    proc = node_main("--lease", str(lease), "--lease-timeout", "1.5", "--stop-grace", "10", "--", "sleep", "4")
    deadline = time.monotonic() + 30
    beat = 0
    while proc.poll() is None and time.monotonic() < deadline:
        beat += 1
        lease.write_text(str(beat))
        time.sleep(0.3)
    assert proc.returncode == 0


def test_peers_that_never_resolve_are_named_and_torchrun_is_not_started(tmp_path):
    marker = tmp_path / "started"
    proc = node_main("--peers", "no-such-peer.invalid", "--ready-timeout", "1", "--", "touch", str(marker))
    assert proc.wait(timeout=30) == 69
    assert "peers no-such-peer.invalid do not resolve" in proc.stdout.read()
    assert not marker.exists()


@pytest.mark.parametrize("detached", [False, True])
def test_every_node_supervisor_command_the_launcher_renders_is_one_it_takes(tmp_path, detached):
    # the plan's node command and the Slurm cluster's daemons both start the node supervisor: its
    # required settings must be in each (a Slurm daemon without --ready-timeout exited at once)
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.layout import NODE_MAIN as NODE_MAIN_IN_NODE
    from orchestrate.plan.make import make_plan
    from orchestrate.slurm.cluster import daemon_command

    lease = tmp_path / "heartbeat"
    lease.write_text("0")

    def options_of(command: list[str]) -> list[str]:
        start = command.index(NODE_MAIN_IN_NODE) + 1
        options = list(command[start:command.index("--", start)])
        if "--peers" in options:  # names that resolve only on the run's network: none to wait for here
            del options[options.index("--peers"):options.index("--peers") + 2]
        if "--lease" in options:  # the heartbeat file, here
            options[options.index("--lease") + 1] = str(lease)
        return options

    plan = make_plan(RunConfig(workdir=tmp_path, runs_dir=tmp_path / "runs", nodes=2), "r", detached=detached)
    for command in (list(plan.nodes[0].command), daemon_command(plan, ["slurmd", "-D"], "0:0")):
        done = subprocess.run([sys.executable, str(NODE_MAIN), *options_of(command), "--", sys.executable, "-c", "pass"],
                              capture_output=True, text=True, timeout=30)  # as rendered: nothing added
        assert done.returncode == 0, (command, done.stderr)
