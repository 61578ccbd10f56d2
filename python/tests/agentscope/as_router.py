"""A real router (built from cmd/router) with embedded NATS, for the AgentScope
tests: its own process per test module, without the router's built-in tools, so
the bus lists exactly the tools a scenario serves (the in-process Toolkit has no
others). The binaries come from the SDK suite's ``bins`` fixture (go build into
.cache/bin).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio

# the AgentScope tests need the extra: pip install ./python[agentscope]
pytest.importorskip("agentscope")


ROOT = Path(__file__).resolve().parents[3]
BIN = ROOT / ".cache" / "bin"


def build(name: str) -> Path:
    out = BIN / name
    if not out.exists():
        BIN.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(out), f"./cmd/{name}"], cwd=ROOT, check=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    """One router process with embedded NATS on a free port."""

    def __init__(self, config: dict | None = None, skills: str | None = None, *extra: str, builtin: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="tb-as-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        args = [str(build("router")), "--listen", f"127.0.0.1:{self.port}", "--data", self.dir + "/js",
                "--builtin=" + ("true" if builtin else "false")]
        if config is not None:
            path = Path(self.dir) / "config.json"
            path.write_text(json.dumps(config))
            args += ["--config", str(path)]
        if skills:
            args += ["--skills", skills]
        args += list(extra)
        self.log = open(Path(self.dir) / "router.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    async def ready(self, timeout: float = 60.0) -> None:
        from toolbus import Client

        end = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"router exited: {Path(self.dir, 'router.log').read_text()[-2000:]}")
            try:
                async def quiet(e: Exception) -> None:
                    pass

                c = await Client.connect(self.url, connect_timeout=1, max_reconnect_attempts=0,
                                         allow_reconnect=False, error_cb=quiet)
                try:
                    await c.tools("ready", timeout=2)
                    return
                finally:
                    await c.close()
            except Exception as e:  # not up yet
                last = e
                await asyncio.sleep(0.1)
        raise RuntimeError(f"router not ready: {last}")

    def toolbus(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {**os.environ, "NATS_URL": self.url}
        return subprocess.run([str(build("toolbus")), *args], env=env, capture_output=True, text=True, timeout=timeout)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest_asyncio.fixture(scope="module")
async def as_router(bins: Any) -> AsyncIterator[Router]:
    """A router of its own for the test module, with no built-in tools (import
    this fixture into the module; the SDK suite's conftest provides ``bins``)."""
    r = Router()
    try:
        await r.ready()
        yield r
    finally:
        r.stop()
