"""A proxy in front of the Docker engine's socket that a test can cut, as a daemon restart or
a remote DOCKER_HOST dropping does: ``DOCKER_HOST=unix://<proxy.path>`` reaches the engine
through it. ``cut_events()`` breaks only the engine's event streams; ``cut()`` breaks every
connection and refuses new ones until ``restore()``."""
from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

ENGINE_SOCKET = "/var/run/docker.sock"


class EngineProxy:
    def __init__(self, path: Path, engine: str = ENGINE_SOCKET) -> None:
        self.path = path
        self.engine = engine
        self.lock = threading.Lock()
        self.connections: list[tuple[socket.socket, socket.socket, bytes]] = []
        self.listener: socket.socket | None = None
        self.serving = threading.Event()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> "EngineProxy":
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        self.serving.set()
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while self.serving.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.engine)
            first = client.recv(65536)
        except OSError:
            client.close()
            upstream.close()
            return
        with self.lock:
            entry = (client, upstream, first)
            self.connections.append(entry)
        upstream.sendall(first)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _close(self, entries) -> None:
        for client, upstream, _ in entries:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def cut_events(self) -> int:
        """Break the open event streams (GET .../events); return how many."""
        with self.lock:
            events = [e for e in self.connections if b"/events" in e[2].split(b"\r\n", 1)[0]]
            self.connections = [e for e in self.connections if e not in events]
        self._close(events)
        return len(events)

    def cut(self) -> None:
        """Break every connection and refuse new ones."""
        self.serving.clear()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        with self.lock:
            entries, self.connections = self.connections, []
        self._close(entries)

    def restore(self) -> None:
        self.start()

    def stop(self) -> None:
        self.cut()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

