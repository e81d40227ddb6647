"""Fixtures: a real `orca serve` per test (random loopback port, temp dir and SQLite database,
offline model), a TCP proxy that cuts connections, and helpers to write one test for both
the sync and the async client.

The server binary is `$ORCA_BIN` (CI builds it; locally e.g. /work/helpers/bin/orca).
"""

from __future__ import annotations

import inspect
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

import orca_client

DEADLINE = 30.0

if os.environ.get("ORCA_SDK_INSTALLED") and "site-packages" not in orca_client.__file__:
    raise RuntimeError(f"testing {orca_client.__file__}, not the installed package")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """Polls `condition` until it returns something truthy; fails the test after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class OrcaServer:
    """One `orca serve` process; `kill()` then `start()` restarts it on the same port and DB."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.bin = os.environ.get("ORCA_BIN")
        if not self.bin:
            raise RuntimeError("set ORCA_BIN to the orca binary (e.g. target/debug/orca)")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "ORCA_LLM__PROVIDER": "offline",
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
            **env,
        }
        self.env.pop("ORCA_URL", None)
        self.env.pop("ORCA_API_KEY", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"orca-{self.starts}.log", "wb")
        cmd = [
            self.bin,
            "serve",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--database-url",
            f"sqlite://{self.workdir}/orca.db",
        ]
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, f"orca serve on {self.url} to be ready")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"orca serve exited with {self.proc.returncode}: {self.log_tail()}")
        try:
            return httpx.get(self.url + "/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def log_tail(self) -> str:
        return (self.workdir / f"orca-{self.starts}.log").read_text(errors="replace")[-2000:]

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=DEADLINE)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def orca_factory(tmp_path: Path):
    """`orca_factory(**env)` starts a server with extra environment (e.g. quotas)."""
    servers: list[OrcaServer] = []

    def make(**env: str) -> OrcaServer:
        workdir = tmp_path / f"orca{len(servers)}"
        workdir.mkdir()
        server = OrcaServer(workdir, env)
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def orca(orca_factory) -> OrcaServer:
    return orca_factory()


@pytest.fixture(params=["sync", "async"])
def flavour(request) -> str:
    return request.param


@pytest.fixture
async def client(orca: OrcaServer, flavour: str):
    """A `Client` or an `AsyncClient` on the test's server (the test is run for each)."""
    if flavour == "sync":
        c = orca_client.Client(orca.url)
        yield c
        c.close()
    else:
        c = orca_client.AsyncClient(orca.url)
        yield c
        await c.close()


async def resolve(value: Any) -> Any:
    """The value of a call of either client (awaited when the async client returned an awaitable)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def collect(iterable: Any) -> list[Any]:
    """Every item of a Pager/RunStream or its async twin."""
    if hasattr(iterable, "__aiter__"):
        return [item async for item in iterable]
    return list(iterable)


class CuttingProxy:
    """A loopback TCP proxy to `target_port` that closes each of the first `cuts` connections
    once `after_bytes` bytes went from the server to the client (mid-event, on purpose)."""

    def __init__(self, target_port: int, after_bytes: int, cuts: int) -> None:
        self.target_port = target_port
        self.after_bytes = after_bytes
        self.cuts_left = cuts
        self.cuts_done = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self.connections += 1
                cut = self.cuts_left > 0
                if cut:
                    self.cuts_left -= 1
            limit = self.after_bytes if cut else None
            threading.Thread(target=self._pump, args=(downstream, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream, limit), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    with self._lock:
                        self.cuts_done += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
