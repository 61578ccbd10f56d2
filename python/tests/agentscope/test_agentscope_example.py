"""examples/python/agentscope_agent.py against examples/python/worker.py on a
real router: the AgentScope agent's py_add call is answered by the Python worker."""
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
