"""The one fake Docker engine of the unit tests.

A small simulation, not a recorder of canned answers: :class:`FakeCompose` creates the node
containers from the Compose file the launcher really rendered (so labels and commands are the
real ones), each container's main process is a :class:`Script` that writes timestamped log
lines and exits, and the engine publishes ``start``/``die``/``oom``/``kill`` events to whoever
follows them. Killing, pausing, restarting and removing behave as on the engine, and engine
errors are the SDK's own exceptions. Every call is recorded in ``client.calls``.
"""
from __future__ import annotations

import json
import queue
import signal as signals
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


@dataclass
class Script:
    """What a node's main process (torchrun) prints and how it ends.

    ``hang``: it runs until killed. ``oom``: the kernel OOM-kills a process in it first.
    ``on_sigterm``: the lines its workers write when it gets SIGTERM before it exits 143
    (``ignore_sigterm``: it goes on, and only SIGKILL ends it; ``unkillable``: not even SIGKILL
    ends it, as a process in uninterruptible sleep on a hung mount or driver). ``processes``:
    the command lines ``top`` lists beside the node's own main process while it runs.
    ``then``: an action run after the lines (e.g. writing a progress file), followed by the
    ``after`` lines once ``after_when`` holds (polled, at most 10 s).
    """

    lines: list[str] = field(default_factory=list)
    exit_code: int = 0
    hang: bool = False
    delay_s: float = 0.005
    oom: bool = False
    then: Optional[Any] = None
    after: list[str] = field(default_factory=list)
    after_when: Optional[Any] = None
    on_sigterm: list[str] = field(default_factory=list)
    ignore_sigterm: bool = False
    unkillable: bool = False
    processes: tuple[str, ...] = (
        "/opt/venv/bin/python /opt/venv/bin/torchrun --nnodes 2 --node-rank 0 /opt/ddp-compose/orchestrate/node/"
        "worker_start.py -- train.py", "/opt/venv/bin/python -u /opt/ddp-compose/orchestrate/node/worker_start.py -- train.py")

    def __post_init__(self) -> None:
        if self.after_when is not None and not self.after:
            raise ValueError("after_when holds back the after lines: a Script with none would not wait")


def filter_values(wanted: Any) -> list:
    """A filter's values as the engine takes them: one string, or a list of them."""
    return [wanted] if isinstance(wanted, str) else list(wanted)


def all_labels_match(labels: dict[str, str], wanted: Any) -> bool:
    for item in filter_values(wanted):
        key, sep, value = item.partition("=")
        if key not in labels or (sep and labels[key] != value):
            return False
    return True


def conflict(message: str, status: int = 409) -> BaseException:
    """The engine's 409: what it answers a call the container's state does not allow (``status``:
    the code it answers instead, such as 403 for a network that has endpoints)."""
    import docker.errors
    import requests

    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(message, response=response, explanation=message)


def signal_number(name: str) -> str:
    """A signal as the engine's kill event names it: its number (``SIGKILL``: "9")."""
    return str(int(getattr(signals, name)))


class FakeEventStream:
    def __init__(self, engine: "FakeDockerClient", wanted: Any, since: Optional[float] = None,
                 decode: bool = False) -> None:
        self.engine = engine
        self.wanted = wanted
        self.decode = decode  # as docker-py: dicts when decoded, else each event's raw JSON bytes
        self.events: "queue.Queue[Optional[dict]]" = queue.Queue()
        with engine.emitting:  # the past since ``since`` first, as the engine replays it, then what comes
            for event in engine.history:
                if since is not None and event["time"] >= since and engine.wanted_by(event, wanted):
                    self.events.put(event)
            engine.subscribers.append(self)

    def __iter__(self) -> Iterator[Any]:  # dicts, or bytes where not decoded
        delivered = 0
        while True:
            if self.engine.events_break_after is not None and delivered >= self.engine.events_break_after:
                import requests

                raise requests.exceptions.ConnectionError("Connection aborted: the engine went away")
            event = self.events.get()
            if event is None:
                return
            time.sleep(self.engine.events_lag_s)
            delivered += 1
            yield event if self.decode else json.dumps(event).encode()

    def close(self) -> None:
        self.events.put(None)


# Every main process a fake container started and that may still run: a test's end stops those it
# left (a hung script waits for its kill for ever), as the engine's containers go with the test.
_STARTED: list[threading.Event] = []


def stop_every_script() -> int:
    """End every fake main process still running (the unit tests' teardown); how many there were."""
    running = [killed for killed in _STARTED if not killed.is_set()]
    for killed in running:
        killed.set()
    _STARTED.clear()
    return len(running)


class FakeContainer:
    def __init__(self, client: "FakeDockerClient", name: str, service: dict) -> None:
        self.client = client
        self.name = name
        self.id = f"id-{name}"
        self.labels = dict(service.get("labels", {}))
        self.service = service
        self.status = "created"
        self.exit_code = 0
        self.oom_killed = False
        self.created = now_rfc3339()
        self.started = "0001-01-01T00:00:00Z"
        self.finished = "0001-01-01T00:00:00Z"
        self.log: list[tuple[float, str]] = []  # its stdout: (time, line)
        self.stderr_log: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self.killed = threading.Event()
        self.runs = 0  # how many times it started: a log stream follows one run, and ends with it
        self.run_ended: dict[int, float] = {}  # each ended run's last moment (a line's time.time())
        self.stop_timeouts: list[int] = []  # what each stop() was given
        self.restart_timeouts: list[int] = []  # what each restart() was given (0: SIGKILL at once)
        # another client is removing it: remove() answers 409 this many times, then NotFound (gone)
        self.removing_elsewhere: Optional[int] = None
        self.removal_s = 0.0  # how long a forced removal of a live container takes after its die
        self.being_removed = False
        self.networks = {f"{self.labels.get('com.docker.compose.project')}_ddp": {}}
        # its address on every network it is on, as the engine says it only while it runs
        client.addresses_given += 1
        self.address = f"172.30.0.{client.addresses_given + 1}"
        self.stop_signal: Optional[str] = service.get("stop_signal")  # the image's STOPSIGNAL or the service's
        self.pending: list[str] = []  # signals sent while it was paused and not resumed by them
        self.resources: dict[str, Any] = {"cpu_period": service.get("cpu_period", 0),
                                          "cpu_quota": service.get("cpu_quota", 0)}

    @property
    def attrs(self) -> dict:
        return {
            "Created": self.created,
            "Config": {"Image": self.service.get("image", ""), "Labels": self.labels},
            "HostConfig": {"Memory": self.service.get("mem_limit", 0), "CpuPeriod": self.resources["cpu_period"],
                           "CpuQuota": self.resources["cpu_quota"], "CapAdd": self.service.get("cap_add"),
                           "Privileged": False},
            "State": {"Status": self.status, "Running": self.status in ("running", "paused"),
                      "Paused": self.status == "paused", "ExitCode": self.exit_code,
                      "OOMKilled": self.oom_killed, "StartedAt": self.started, "FinishedAt": self.finished},
            "NetworkSettings": {"Networks": {
                name: {"IPAddress": self.address, **settings} if self.status in ("running", "paused")
                else {**settings, "IPAddress": ""}
                for name, settings in self.networks.items()}},
        }

    # the main process -------------------------------------------------------------------

    def start(self) -> None:
        script = self.client.next_script(self.labels.get("com.docker.compose.service", self.name))
        self.script = script
        self.killed = threading.Event()
        _STARTED.append(self.killed)
        with self.changed:
            self.status, self.started = "running", now_rfc3339()
            self.runs += 1
            self.changed.notify_all()
        self.client.emit(self, "start")
        threading.Thread(target=self._run, args=(script, self.killed), daemon=True).start()

    def _run(self, script: Script, killed: threading.Event) -> None:
        for line in script.lines:
            if killed.is_set():
                return
            self.write(line)
            time.sleep(script.delay_s)
        if script.oom:
            self.oom_killed = True
            self.client.emit(self, "oom")
        if script.then is not None:
            script.then()
        if script.after and script.after_when is not None:
            deadline = time.monotonic() + 10
            while not script.after_when() and time.monotonic() < deadline and not killed.is_set():
                time.sleep(0.01)
        for line in script.after:
            if killed.is_set():
                return
            self.write(line)
        if script.hang:  # runs until killed, however long that takes
            killed.wait()
            return
        if not killed.is_set():
            self.exit(script.exit_code)

    def write(self, line: str, source: str = "stdout") -> None:
        with self.changed:
            (self.log if source == "stdout" else self.stderr_log).append((time.time(), line))
            self.changed.notify_all()

    def exit(self, code: int) -> None:
        with self.changed:  # (the engine says "removing" from the kill of a forced removal on)
            self.status = "removing" if self.being_removed else "exited"
            self.exit_code, self.finished = code, now_rfc3339()
            self.run_ended[self.runs] = time.time()
            self.changed.notify_all()
        self.client.emit(self, "die", exitCode=str(code))

    # the SDK's model methods ------------------------------------------------------------

    def must_exist(self) -> None:
        """The engine's 404 for any call on a container removed (``docker rm -f`` from elsewhere)."""
        if self.name not in self.client.containers_by_name:
            import docker.errors

            raise docker.errors.NotFound(f"No such container: {self.name}")

    def reload(self) -> None:
        self.client.calls.append(("reload", self.name))
        self.client.maybe_fail("reload")
        self.must_exist()

    def kill(self, signal: str = "SIGKILL") -> None:
        self.client.calls.append(("kill", self.name) if signal == "SIGKILL" else ("kill", self.name, signal))
        self.client.maybe_fail("kill")
        self.must_exist()
        if self.status not in ("running", "paused"):
            raise conflict(f"Container {self.name} is not running")
        self.send(signal)

    def send(self, signal: str) -> None:
        """The engine's signal to the main process, as it records it: delivered at once, after
        resuming a paused container where the engine does, else once the container thaws."""
        self.client.emit(self, "kill", signal=signal_number(signal))
        if self.status == "paused" and not self.resumed_by(signal):
            self.pending.append(signal)  # the frozen process gets it once thawed
            return
        self.deliver(signal)

    def resumed_by(self, signal: str) -> bool:
        """Whether the engine resumes a paused container after sending it ``signal`` (moby's
        ``killWithSignal``, 20.10 and later): after SIGKILL, and after any signal when the
        container has no stop signal (its image's STOPSIGNAL or its service's ``stop_signal``; the
        nodes set none) or this is it. Measured on 20.10.24: ``kill -s USR1`` of a paused
        container records kill, then unpause; ``kill`` records kill, then die."""
        if self.status != "paused":
            return False
        if signal != "SIGKILL" and self.stop_signal not in (None, signal):
            return False
        self.thaw(event=signal != "SIGKILL")
        return True

    def thaw(self, event: bool = True) -> None:
        """Running again: the signals sent while it was frozen reach it now."""
        self.status = "running"
        if event:
            self.client.emit(self, "unpause")
        pending, self.pending = self.pending, []
        for signal in pending:
            self.deliver(signal)

    def deliver(self, signal: str) -> None:
        """The main process gets ``signal``: SIGTERM, or the container's own stop signal, ends it
        as a stop does (its ``on_sigterm`` lines, 143) unless it ignores it; any other signal kills
        it (137); an unkillable process outlives them all, and an ended one gets nothing."""
        if self.script.unkillable or self.status != "running":
            return
        if signal in ("SIGTERM", self.stop_signal):
            if self.script.ignore_sigterm:
                return
            self.killed.set()
            for line in self.script.on_sigterm:
                self.write(line)
            self.exit(143)
            return
        self.killed.set()
        self.exit(137)

    def stop(self, timeout: int = 10) -> None:
        """SIGTERM, then SIGKILL ``timeout`` seconds later if it is still running (a process
        that ignores SIGTERM waits the whole timeout; a paused container is resumed by the
        SIGTERM, as the engine does)."""
        self.client.calls.append(("stop", self.name))
        self.stop_timeouts.append(timeout)
        self.client.maybe_fail("stop")
        self.must_exist()
        if self.status not in ("running", "paused"):
            return
        self.send(self.stop_signal or "SIGTERM")  # the container's own stop signal: a paused one resumes
        if self.status == "running":
            self.killed.wait(timeout)
            self.send("SIGKILL")
        self.client.emit(self, "stop")

    def top(self, ps_args: str = "") -> dict:
        """``docker top``: the container's processes as ps lists them (host pids), the node's own
        main process first; 409 unless it runs (a paused one's are frozen: "D"), and the
        engine's 500 when ``ps_args`` leave out the PID column it needs to tell them apart."""
        self.client.calls.append(("top", self.name))
        self.client.maybe_fail("top")
        self.must_exist()
        if self.status not in ("running", "paused"):
            raise conflict(f"Container {self.name} is not running")
        columns = ps_args.split("-o", 1)[1].strip().split(",") if "-o" in ps_args else ["pid", "tty", "time", "args"]
        if "pid" not in columns:
            raise conflict("Couldn't find PID field in ps output", status=500)
        state = "D" if self.status == "paused" else "S"
        own = ("/sbin/docker-init -- python3 /opt/ddp-compose/orchestrate/node/main.py --peers node0 -- torchrun",
               "python3 /opt/ddp-compose/orchestrate/node/main.py --peers node0 -- torchrun")
        rows = [{"pid": str(4200 + i), "stat": state + ("s" if i == 0 else ""), "tty": "?", "time": "00:00:01",
                 "args": args} for i, args in enumerate((*own, *self.script.processes))]
        titles = {"pid": "PID", "stat": "STAT", "tty": "TTY", "time": "TIME", "args": "COMMAND"}
        return {"Titles": [titles[c] for c in columns], "Processes": [[row[c] for c in columns] for row in rows]}

    def pause(self) -> None:
        self.client.calls.append(("pause", self.name))
        self.client.maybe_fail("pause")
        self.must_exist()
        if self.status != "running":
            raise conflict(f"Container {self.name} is not running" if self.status != "paused"
                           else f"Container {self.name} is already paused")
        self.status = "paused"
        self.client.emit(self, "pause")

    def unpause(self) -> None:
        self.client.calls.append(("unpause", self.name))
        self.client.maybe_fail("unpause")
        self.must_exist()
        if self.status != "paused":
            raise conflict(f"Container {self.name} is not paused")
        self.thaw()

    def update(self, **resources: Any) -> dict:
        """``docker update``: the CPU quota (``cpu_period``, ``cpu_quota``; -1 lifts it)."""
        self.client.calls.append(("update", self.name, tuple(sorted(resources.items()))))
        self.client.maybe_fail("update")
        self.must_exist()
        if self.status not in ("running", "paused", "created"):
            import docker.errors

            raise docker.errors.APIError(f"Cannot update container {self.name}: it is not running")
        self.resources.update(resources)
        return {"Warnings": None}

    def restart(self, timeout: int = 10) -> None:
        """The engine's restart: its stop, then a start, recorded as it records them (moby
        20.10.24, measured: kill 15, kill 9 where the grace ran out, die, stop, start, restart;
        a paused container's first kill resumes it, an unpause between the two kills). The stop
        signal, then SIGKILL after ``timeout`` seconds; with 0 the SIGKILL comes before the
        process can act on the first. A process that outlives the SIGKILL fails the restart here
        (a shortcut: the engine's stop waits on for it, as long as it lives, a wait the fake's
        ``stop`` does not model either)."""
        self.client.calls.append(("restart", self.name))
        self.restart_timeouts.append(timeout)
        self.client.maybe_fail("restart")
        self.must_exist()
        if self.status in ("running", "paused"):
            first = self.stop_signal or "SIGTERM"
            if timeout > 0:
                self.send(first)
                if self.status == "running":
                    self.killed.wait(timeout)
            else:  # no time to act on it
                self.client.emit(self, "kill", signal=signal_number(first))
                self.resumed_by(first)
            if self.status in ("running", "paused"):
                self.send("SIGKILL")
            if self.status in ("running", "paused"):
                import docker.errors

                raise docker.errors.APIError(f"Cannot restart container {self.id}: tried to kill container, but did"
                                             " not receive an exit event")
            self.client.emit(self, "stop")
        self.start()
        self.client.emit(self, "restart")

    def remove(self, force: bool = False) -> None:
        self.client.calls.append(("remove", self.name))
        self.client.maybe_fail("remove")
        if self.removing_elsewhere is not None:
            import docker.errors

            self.removing_elsewhere -= 1
            if self.removing_elsewhere < 0:  # the other removal has ended
                self.killed.set()
                self.client.containers_by_name.pop(self.name, None)
                raise docker.errors.NotFound(f"No such container: {self.id}")
            raise conflict(f"removal of container {self.id} is already in progress")
        if self.status in ("running", "paused") and not force:
            raise conflict(f"You cannot remove a running container {self.id}. Stop the container before attempting"
                           " removal or force remove")
        if self.status in ("running", "paused"):  # `rm -f`: as the engine records it, kill 9, die 137, destroy,
            self.being_removed = True  # the status "removing" at the die (moby, measured)
            self.send("SIGKILL")  # an unkillable process: the engine fails after ~12 s, not modelled
            time.sleep(self.removal_s)
        self.killed.set()
        self.client.containers_by_name.pop(self.name, None)
        self.client.emit(self, "destroy")

    def logs(self, stream: bool = False, follow: bool = False, timestamps: bool = False,
             since: Optional[float] = None, stdout: bool = True, stderr: bool = True, tail: Any = "all") -> Any:
        """The engine's log: the streams asked for (both: merged in time), from ``since`` on; of
        a log read whole, its last ``tail`` lines (docker-py's: a number, or "all")."""
        def render(stamp: float, line: str) -> bytes:
            prefix = datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ")
            return ((prefix if timestamps else "") + line + "\n").encode()

        def lines() -> list[tuple[float, str]]:  # under self.changed
            asked = (self.log if stdout else []) + (self.stderr_log if stderr else [])
            return sorted(asked, key=lambda entry: entry[0]) if stdout and stderr else asked

        self.client.maybe_fail("logs")
        self.must_exist()
        if not stream:
            with self.changed:
                asked = [(s, ln) for s, ln in lines() if since is None or s >= since]
            if tail != "all":
                asked = asked[len(asked) - int(tail):] if int(tail) > 0 else []
            return b"".join(render(s, ln) for s, ln in asked)

        run = self.runs  # as the engine's follow: it follows the run it was asked in, and ends with it,

        def chunks() -> Iterator[bytes]:  # even where the container has started again by the time it looks
            index = 0
            while True:
                with self.changed:
                    while (index >= len(lines()) and follow and self.status in ("running", "paused")
                           and self.runs == run):
                        self.changed.wait(timeout=0.5)
                    pending = lines()[index:]
                    index += len(pending)
                    running = self.status in ("running", "paused") and self.runs == run
                    if run in self.run_ended:
                        pending = [(stamp, line) for stamp, line in pending if stamp <= self.run_ended[run]]
                for stamp, line in pending:
                    if since is None or stamp >= since:
                        yield render(stamp, line)
                if not follow or not running:
                    if follow:
                        time.sleep(self.client.log_end_lag_s)
                    return

        return chunks()


class FakeNetwork:
    def __init__(self, client: "FakeDockerClient", name: str, labels: dict, age_s: float = 0.0) -> None:
        self.client = client
        self.name = name
        self.labels = labels
        self.removed_elsewhere = False  # listed, but removed by another client before this one removes it
        made = datetime.fromtimestamp(time.time() + client.clock_offset_s - age_s, timezone.utc)
        self.created = made.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")  # on the engine's clock, as it says it

    @property
    def attrs(self) -> dict:
        """As the engine lists a network (docker-py's models have no ``labels`` of their own)."""
        return {"Name": self.name, "Labels": dict(self.labels), "Created": self.created}

    def disconnect(self, container: FakeContainer, force: bool = False) -> None:
        self.client.calls.append(("disconnect", container.name, self.name))
        self.client.maybe_fail("disconnect")
        container.networks.pop(self.name, None)

    def connect(self, container: FakeContainer, aliases: Optional[list] = None) -> None:
        self.client.calls.append(("connect", container.name, self.name, tuple(aliases or ())))
        self.client.maybe_fail("connect")
        container.networks[self.name] = {"Aliases": list(aliases or [])}

    def remove(self) -> None:
        self.client.calls.append(("network.remove", self.name))
        attached = [c.id for c in self.client.containers_by_name.values() if self.name in c.networks]
        if attached and not self.removed_elsewhere:
            raise conflict(f"error while removing network: network {self.name} id {self.name} has active endpoints",
                           status=403)  # as Docker 20.10 answers it
        self.client.networks_by_name.pop(self.name, None)
        self.gone_if_removed_elsewhere("network")

    def gone_if_removed_elsewhere(self, kind: str) -> None:
        import docker.errors

        if self.removed_elsewhere:
            raise docker.errors.NotFound(f"{kind} {self.name} not found")


class FakeVolume(FakeNetwork):
    @property
    def attrs(self) -> dict:
        """As the engine lists a volume: its time is ``CreatedAt``."""
        return {"Name": self.name, "Labels": dict(self.labels), "CreatedAt": self.created}

    def remove(self, force: bool = False) -> None:
        self.client.calls.append(("volume.remove", self.name))
        self.client.volumes_by_name.pop(self.name, None)
        self.gone_if_removed_elsewhere("volume")


class _Collection:
    def __init__(self, client: "FakeDockerClient", attr: str) -> None:
        self.client = client
        self.attr = attr

    def list(self, all: bool = False, filters: Optional[dict] = None, ignore_removed: bool = False) -> list:
        """As docker-py lists: the ids first, then each one inspected; one removed in between
        (``vanishing``) raises NotFound unless ``ignore_removed``. Containers come newest first,
        as the engine lists them."""
        import docker.errors

        wanted = (filters or {}).get("label", [])
        self.client.calls.append((f"{self.attr}.list", tuple(filter_values(wanted))))
        self.client.maybe_fail(f"{self.attr.split('_')[0]}.list")
        items = list(getattr(self.client, self.attr).values())
        if self.attr == "containers_by_name":
            items.reverse()  # created in this order
        found = [item for item in items if all_labels_match(item.labels, wanted)
                 and (all or getattr(item, "status", "running") in ("running", "paused"))]  # as docker ps: the live
        vanished = [item for item in found if getattr(item, "vanishing", False)]
        if vanished and not ignore_removed:
            raise docker.errors.NotFound(f"No such container: {vanished[0].id}")
        return [item for item in found if item not in vanished]

    def get(self, name: str) -> Any:
        """One by its name, as the engine inspects it; NotFound where it has none."""
        import docker.errors

        self.client.calls.append((f"{self.attr}.get", name))
        self.client.maybe_fail(f"{self.attr.split('_')[0]}.get")
        if name not in getattr(self.client, self.attr):
            raise docker.errors.NotFound(f"{self.attr.split('_')[0][:-1]} {name} not found")
        return getattr(self.client, self.attr)[name]


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
        self.pullable: set[str] = set()
        self.dangling: list[FakeImage] = []  # untagged images, by id
        self.vanishing: list[FakeImage] = []  # listed, but removed by another client before a look

    def listed(self, filters: Optional[dict]) -> list[FakeImage]:
        """What the engine's list answers, before anything is inspected: the dangling ones, or
        the tagged ones whose labels match (``label``: KEY or KEY=VALUE, one or several)."""
        if (filters or {}).get("dangling"):
            return list(self.dangling)
        wanted = (filters or {}).get("label") or []
        unique = {id(image): image for image in self.by_name.values()}.values()  # (one image under several tags: once)
        return [image for image in unique if all_labels_match(image.labels, wanted)]

    def list(self, filters: Optional[dict] = None) -> list:
        """As the SDK's: the engine's list, then an inspection of each image in it, which raises
        ImageNotFound for one removed in between (``vanishing``: by another client)."""
        import docker.errors

        self.client.calls.append(("images.list", json.dumps(filters, sort_keys=True)))
        found = self.listed(filters)
        vanished = [image for image in found if image in self.vanishing]
        if vanished:
            raise docker.errors.ImageNotFound(f"No such image: {vanished[0].id}")
        return found

    def remove(self, image: str, force: bool = False, noprune: bool = False) -> None:
        import docker.errors

        self.client.calls.append(("images.remove", image))
        gone = [i for i in self.vanishing if image in (i.id, *i.tags)]
        holders = [i for i in {id(x): x for x in [*self.dangling, *self.by_name.values()]}.values()
                   if image in (i.id, *i.tags)]
        if gone or not holders:
            raise docker.errors.ImageNotFound(f"No such image: {image}")
        target = holders[0]
        by_tag = image in target.tags
        if not by_tag and len(target.tags) > 1 and not force:  # an id that several tags name
            raise conflict(f"conflict: unable to delete {image} (must be forced) - image is referenced in multiple"
                           " repositories")
        names = [image] if by_tag else list(target.tags)
        remaining = [tag for tag in target.tags if tag not in names]
        users = [c for c in self.client.containers_by_name.values() if c.service.get("image") in target.tags]
        if not remaining and users and not force:  # the engine's 409, for a stopped container's image too
            raise conflict(f"conflict: unable to remove repository reference {image!r} (must force) - container"
                           f" {users[0].id} is using its referenced image")
        target.tags = remaining  # (a tag of several: that tag alone goes)
        for name in names:
            self.by_name.pop(name, None)
        if not remaining:
            self.dangling = [i for i in self.dangling if i is not target]

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
            raise docker.errors.APIError(f"pull access denied for {name}",
                                         explanation="dial tcp: lookup registry: no such host")
        return self.add(name)


class FakeAPI:
    """``client.api``: exec, for the commands the launcher runs in a node (OOM counter, topology)."""

    def __init__(self, client: "FakeDockerClient") -> None:
        self.client = client
        self.execs: dict[str, tuple[FakeContainer, list[str]]] = {}
        self.users: dict[str, str] = {}  # each exec's user, by its id

    def exec_create(self, container_id: str, cmd: list[str], **kwargs: Any) -> dict:
        import docker.errors

        self.client.maybe_fail("exec")
        container = next((c for c in self.client.containers_by_name.values() if c.id == container_id), None)
        if container is None:
            raise docker.errors.NotFound(f"No such container: {container_id}")
        if container.status != "running":
            raise conflict(f"Container {container_id} is {'paused' if container.status == 'paused' else 'not running'}")
        exec_id = f"exec-{len(self.execs)}"
        self.execs[exec_id] = (container, list(cmd))
        self.users[exec_id] = kwargs.get("user") or ""  # "" runs as the container's own user
        self.client.calls.append(("exec_create", container.name, tuple(cmd)))
        return {"Id": exec_id}

    def ran_as(self, node: str, argv0: str) -> list[str]:
        """The user each command ``argv0`` ran as in container ``node``, in order."""
        return [self.users[i] for i, (c, cmd) in self.execs.items() if c.name == node and cmd[0] == argv0]

    def exec_start(self, exec_id: str, stream: bool = False) -> bytes:
        container, cmd = self.execs[exec_id]
        return self.client.output_for(container.name, cmd)[1]

    def exec_inspect(self, exec_id: str) -> dict:
        container, cmd = self.execs[exec_id]
        return {"ExitCode": self.client.output_for(container.name, cmd)[0]}

    def images(self, name: Optional[str] = None, quiet: bool = False, all: bool = False,
               filters: Optional[dict] = None) -> list:
        """The engine's image list as it answers it, inspecting none: ids when ``quiet``."""
        self.client.calls.append(("api.images", json.dumps(filters, sort_keys=True)))
        found = self.client.images.listed(filters)
        return [image.id for image in found] if quiet else [{"Id": image.id, "RepoTags": image.tags} for image in found]

    def build(self, **kwargs: Any) -> Iterator[dict]:
        """A classic-builder build: streams ``client.build_output`` (decoded chunks)."""
        self.client.calls.append(("build", kwargs.get("tag")))
        yield from self.client.build_output

    def import_image_from_stream(self, stream: Any, repository: Optional[str] = None, tag: Optional[str] = None,
                                 changes: Optional[list] = None) -> str:
        """``docker import``: reads the tar stream; ``client.import_fails_after`` bytes makes it
        refuse part way, as an engine out of disk does."""
        import docker.errors

        self.client.calls.append(("import", f"{repository}:{tag}"))
        read = 0
        while True:
            chunk = stream.read(65536)
            if not chunk:
                break
            read += len(chunk)
            if self.client.import_fails_after is not None and read >= self.client.import_fails_after:
                raise docker.errors.APIError("500 Server Error", explanation="no space left on device")
        self.client.images.add(f"{repository}:{tag}")
        return '{"status": "sha256:0"}'


class FakeDockerClient:
    """The engine: containers, networks, volumes, images, events, ``api`` and a call log."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.containers_by_name: dict[str, FakeContainer] = {}
        self.addresses_given = 0  # each container's address on the run's network is its own
        self.networks_by_name: dict[str, FakeNetwork] = {}
        self.volumes_by_name: dict[str, FakeVolume] = {}
        # node -> the scripts of its main process, one per start
        self.scripts: dict[str, list[Script]] = {}
        # what exec'd commands print: argv[0] or (node, argv[0]) -> (exit code, output), or a function
        # of the whole argv that answers so (a command whose answer depends on its arguments)
        self.command_outputs: dict = {}
        self.subscribers: list[FakeEventStream] = []
        self.history: list[dict] = []  # every event emitted, for a stream opened with since=
        self.emitting = threading.Lock()
        self.gpus: tuple[str, ...] = ()
        self.clock_offset_s = 0.0  # the engine's clock (info's SystemTime) this far ahead of the host's
        self.failures: dict[str, BaseException] = {}
        self.events_break_after: Optional[int] = None
        self.events_lag_s = 0.0  # each event reaches its reader this late (a busy engine)
        self.log_end_lag_s = 0.0  # a followed log ends this late after its container's run (a busy engine)
        self.build_output: list[dict] = []
        self.import_fails_after: Optional[int] = None
        self.containers = _Collection(self, "containers_by_name")
        self.networks = _Collection(self, "networks_by_name")
        self.volumes = _Collection(self, "volumes_by_name")
        self.images = FakeImages(self)
        self.api = FakeAPI(self)

    def maybe_fail(self, call: str) -> None:
        """Raise what a test asked ``call`` to raise."""
        if call in self.failures:
            raise self.failures[call]

    def running(self, name: str, labels: Optional[dict] = None, script_as: str = "") -> FakeContainer:
        """A container of this engine, started with a process that runs until it is stopped
        (its script looked up as ``script_as``, else by its name)."""
        container = FakeContainer(self, name, {"labels": dict(labels or {})})
        self.containers_by_name[name] = container
        self.script(script_as or name, Script(hang=True))
        container.start()
        return container

    def script(self, node: str, *scripts: Script) -> None:
        self.scripts[node] = list(scripts)

    def next_script(self, node: str) -> Script:
        queue_ = self.scripts.get(node) or [Script()]
        return queue_.pop(0) if len(queue_) > 1 else queue_[0]

    def output_for(self, node: str, cmd: list[str]) -> tuple[int, bytes]:
        answer = self.command_outputs.get((node, cmd[0])) or self.command_outputs.get(cmd[0]) or (0, b"")
        return answer(cmd) if callable(answer) else answer

    def emit(self, container: FakeContainer, action: str, **attributes: str) -> None:
        now_ns = time.time_ns()
        event = {"Type": "container", "Action": action, "time": now_ns // 10**9, "timeNano": now_ns,
                 "Actor": {"ID": container.id, "Attributes": {**container.labels, "name": container.name,
                                                               **attributes}}}
        with self.emitting:
            self.history.append(event)
            for stream in list(self.subscribers):
                if self.wanted_by(event, stream.wanted):
                    stream.events.put(event)

    @staticmethod
    def wanted_by(event: dict, filters: Any) -> bool:
        """As the engine filters events: by their labels, and by their type where one is given."""
        types = filter_values((filters or {}).get("type") or [])
        if types and event["Type"] not in types:
            return False
        return all_labels_match(event["Actor"]["Attributes"], (filters or {}).get("label", []))

    def events(self, decode: Optional[bool] = None, since: Any = None, filters: Optional[dict] = None) -> FakeEventStream:
        """The event stream; ``since`` (epoch seconds) replays the events from then first;
        raw bytes unless ``decode``, as docker-py's."""
        self.calls.append(("events", json.dumps(filters, sort_keys=True)))
        self.maybe_fail("events")
        return FakeEventStream(self, filters, since, bool(decode))

    def info(self) -> dict:
        """The engine's answer; the NVIDIA runtime is there when ``gpus`` lists the host's GPUs."""
        self.maybe_fail("info")
        runtimes = {"runc": {}, **({"nvidia": {}} if self.gpus else {})}
        clock = datetime.fromtimestamp(time.time() + self.clock_offset_s, timezone.utc)
        return {"NCPU": 2, "MemTotal": 24 * 1024**3, "Runtimes": runtimes,
                "SystemTime": clock.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")}

    def up(self, compose_file: Path, start: bool = True) -> None:
        """What ``docker compose up -d`` does to the engine for the rendered project (``start``
        False: the containers are only created)."""
        project = json.loads(compose_file.read_text())
        name = project["name"]
        common = {"com.docker.compose.project": name}
        network_labels = {**common, **project.get("networks", {}).get("ddp", {}).get("labels", {}), "com.docker.compose.network": "ddp"}
        self.networks_by_name[f"{name}_ddp"] = FakeNetwork(self, f"{name}_ddp", network_labels)
        volume_labels = {**common, **project.get("volumes", {}).get("shared", {}).get("labels", {}), "com.docker.compose.volume": "shared"}
        self.volumes_by_name[f"{name}_shared"] = FakeVolume(self, f"{name}_shared", volume_labels)
        for service_name, service in project["services"].items():
            service = json.loads(json.dumps(service).replace("$$", "$"))
            service["labels"] = {**service["labels"], **common, "com.docker.compose.service": service_name}
            container = FakeContainer(self, f"{name}-{service_name}-1", service)
            self.containers_by_name[container.name] = container
        for container in [c for c in self.containers_by_name.values() if c.status == "created" and start]:
            container.start()


class FakeCompose:
    """Stands in for ComposeProject: ``up`` and ``down`` act on the fake engine."""

    engine: Optional[FakeDockerClient] = None
    fail_down = False
    fail_up = False
    instances: list["FakeCompose"] = []

    def __init__(self, project_name: str, compose_file: Path) -> None:
        self.project_name = project_name
        self.compose_file = compose_file
        self.calls: list[str] = []
        FakeCompose.instances.append(self)

    @staticmethod
    def find_cli() -> tuple[str, ...]:
        return ("docker", "compose")

    def up(self) -> None:
        from orchestrate.errors import ComposeError

        self.calls.append("up")
        if FakeCompose.fail_up:  # as Compose fails: the network made, a container that could not start
            FakeCompose.engine.up(self.compose_file, start=False)
            raise ComposeError(["docker", "compose", "up"], 1, "Error response from daemon: port is already allocated")
        assert FakeCompose.engine is not None
        FakeCompose.engine.up(self.compose_file)

    def down(self) -> None:
        from orchestrate.errors import ComposeError

        self.calls.append("down")
        if FakeCompose.fail_down:
            raise ComposeError(["docker", "compose", "down"], 1, "Error response from daemon: device busy")
        engine = FakeCompose.engine
        for container in [c for c in list(engine.containers_by_name.values())
                          if c.labels.get("com.docker.compose.project") == self.project_name]:
            container.remove(force=True)
        for store in (engine.networks_by_name, engine.volumes_by_name):
            for key in [k for k, v in list(store.items())
                        if v.labels.get("com.docker.compose.project") == self.project_name]:
                store.pop(key, None)


def fake_engine(client: Optional["FakeDockerClient"] = None, **scripts: list[Script]) -> "FakeDockerClient":
    """The fake engine (a new one unless ``client``), with the node image, each node's scripts
    and the fake Compose on it."""
    from orchestrate.config.run_config import DEFAULT_IMAGE

    client = client if client is not None else FakeDockerClient()
    FakeCompose.engine = client
    FakeCompose.instances.clear()
    if DEFAULT_IMAGE not in client.images.by_name:
        client.images.add(DEFAULT_IMAGE)
    for node, node_scripts in scripts.items():
        client.script(node, *node_scripts)
    return client


def in_a_thread(action: Callable[[], None]) -> Callable[[], None]:
    """A Script's ``then`` that does ``action`` beside the node's script, as another terminal would."""
    return lambda: threading.Thread(target=action, daemon=True).start()


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail the test when it has not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
