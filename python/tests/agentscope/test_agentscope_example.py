"""examples/python/agentscope_agent.py against examples/python/worker.py on a
real router: the AgentScope agent's py_add call is answered by the Python worker;
examples/python/agentscope_tools.py serves an AgentScope tool on the bus."""
from __future__ import annotations

from as_router import ROOT, Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import asyncio
import os
import subprocess
import sys
import time


async def test_agentscope_example(as_router: Router, session: str) -> None:
    from toolbus import Client

    env = {**os.environ, "NATS_URL": as_router.url}
    worker = subprocess.Popen([sys.executable, str(ROOT / "examples/python/worker.py")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async with await Client.connect(as_router.url) as c:
            end = time.monotonic() + 60
            while not any(t["name"] == "py_add" for t in (await c.tools(session)).tools):
                assert time.monotonic() < end, "py_add never registered"
                assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
                await asyncio.sleep(0.1)
        out = await asyncio.to_thread(
            subprocess.run, [sys.executable, str(ROOT / "examples/python/agentscope_agent.py"), session],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "42", out.stdout + out.stderr
    finally:
        worker.terminate()
        worker.wait(30)


async def test_agentscope_tools_example(as_router: Router, session: str) -> None:
    """examples/python/agentscope_tools.py says `serving as_mul` on stderr once registered (the
    README tells a user to wait for it), and then as_mul answers 6 * 7."""
    from toolbus import Client

    env = {**os.environ, "NATS_URL": as_router.url}
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples/python/agentscope_tools.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 120)  # type: ignore[union-attr]
        assert "serving as_mul on " in line, line
        async with await Client.connect(as_router.url) as c:
            reply = await c.call(session, [{"id": "c1", "name": "as_mul", "input": {"a": 6, "b": 7}}])
        assert reply.results[0].ok and reply.results[0].text == "42", reply
    finally:
        proc.terminate()
        proc.wait(30)
