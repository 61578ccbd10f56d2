"""Fixtures: a real router (cmd/router, embedded NATS with JetStream) built from this repository."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import nats
import pytest
import pytest_asyncio

import toolbus

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "bin"


def build(name: str) -> Path:
    """go build ./cmd/<name> into .cache/bin (incremental: cheap when nothing changed)."""
    BIN.mkdir(parents=True, exist_ok=True)
    out = BIN / name
    if os.environ.get("TOOLBUS_SKIP_BUILD") and out.exists():
        return out
    subprocess.run(["go", "build", "-o", str(out), f"./cmd/{name}"], cwd=ROOT, check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Router:
    url: str
    proc: subprocess.Popen[bytes]
    data: str
    log: Path
    bins: dict[str, Path]

    def cli(self, *args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run the Go CLI (cmd/toolbus) against this router."""
        return subprocess.run([str(self.bins["toolbus"]), *args], env={**os.environ, "NATS_URL": self.url, **(env or {})},
                              capture_output=True, text=True, timeout=timeout)


async def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, within: float = 60.0, **login: Any) -> None:
    """Bounded polling: connect (with the login's nats.connect options), then ask for a tools listing until a router answers."""
    end = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            async with toolbus.Client(await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0, allow_reconnect=False, **login)) as c:
                try:
                    await c.tools("ready", timeout=2)
                    return
                finally:
                    await c.nc.close()
        except Exception as err:  # noqa: BLE001 - not up yet
            last = err
        await asyncio.sleep(0.1)
    raise RuntimeError(f"router at {url} not ready within {within}s: {last!r}\n{log.read_text()[-4000:]}")


def start_router(tmp: str, bins: dict[str, Path], *extra: str) -> Router:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    data = os.path.join(tmp, f"data-{port}")
    log = Path(tmp) / f"router-{port}.log"
    f = open(log, "wb")
    proc = subprocess.Popen([str(bins["router"]), "--listen", f"127.0.0.1:{port}", "--data", data, *extra],
                            stdout=f, stderr=subprocess.STDOUT, cwd=tmp)
    return Router(url, proc, data, log, bins)


def stop_router(r: Router) -> None:
    if r.proc.poll() is None:
        r.proc.terminate()
        try:
            r.proc.wait(20)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait(10)


@pytest.fixture(scope="session")
def bins() -> dict[str, Path]:
    if shutil.which("go") is None and not (BIN / "router").exists():
        pytest.skip("go is needed to build the router")
    return {n: build(n) for n in ("router", "toolbus", "toolworker")}


@pytest.fixture(scope="session")
def tmpdir_session() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="toolbus-py-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest_asyncio.fixture(scope="session")
async def router(bins: dict[str, Path], tmpdir_session: str) -> AsyncIterator[Router]:
    r = start_router(tmpdir_session, bins, "--heartbeat", "1s", "--inline-output", "256KiB")
    try:
        await wait_ready(r.url, r.proc, r.log)
        yield r
    finally:
        stop_router(r)


@pytest_asyncio.fixture
async def client(router: Router) -> AsyncIterator[toolbus.Client]:
    c = await toolbus.Client.connect(router.url, source="pytest")
    try:
        yield c
    finally:
        await c.close()


_n = 0


@pytest.fixture
def session(request: pytest.FixtureRequest) -> str:
    """A fresh session id per test."""
    global _n
    _n += 1
    name = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:80]
    return f"py-{_n}-{name}"


@pytest_asyncio.fixture
async def worker_factory(router: Router) -> AsyncIterator[Any]:
    """Start Python workers on the router; every one is drained at the end."""
    made: list[toolbus.Worker] = []

    async def make(*tools: Any, strict: bool = True, **kw: Any) -> toolbus.Worker:
        kw.setdefault("heartbeat", 1.0)
        w = await toolbus.Worker.connect(router.url, **kw)
        w.add(*tools)
        made.append(w)
        await w.start(strict=strict)
        return w

    yield make
    for w in made:
        await w.drain(timeout=2)


def unique(name: str) -> str:
    """A tool name no other test uses (definitions live for the router's whole run)."""
    global _n
    _n += 1
    return f"{name}_{_n}_{os.getpid()}"


sys.path.insert(0, str(Path(__file__).parent))
