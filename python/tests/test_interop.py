"""Interop with the Go implementation on one real router: Go agents call Python workers and back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import toolbus
from conftest import ROOT, unique


async def wait_listed(client: toolbus.Client, tool: str, within: float = 60.0) -> None:
    """Bounded polling until the tool shows in a listing (its worker registered)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        if tool in (await client.tools("interop-probe")).names:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{tool} never listed")


async def test_go_cli_calls_python_worker(router, worker_factory):
    name = unique("py_greet")

    @toolbus.tool(name=name, read_only=True)
    async def greet(who: str, ctx: toolbus.ToolContext) -> str:
        """Greet someone."""
        return f"hello {who} from python ({ctx.user})"

    await worker_factory(greet)
    out = await asyncio.to_thread(router.cli, "call", "--session", "go-agent", "--user", "gopher", name, '{"who": "go"}')
    assert out.returncode == 0, out.stderr
    assert f"{name}: success" in out.stdout and "hello go from python (gopher)" in out.stdout
    # The Go CLI's listing shows the Python tool's derived schema.
    out = await asyncio.to_thread(router.cli, "tools", "--session", "go-agent", "--format", "anthropic")
    assert name in out.stdout and '"who"' in out.stdout


async def test_go_cli_fetches_python_stored_output(router, worker_factory):
    name = unique("py_big_go")
    text = "0123456789abcdef" * 200_000  # 3.2 MB

    @toolbus.tool(name=name, read_only=True)
    async def big() -> str:
        return text

    await worker_factory(big)
    out = await asyncio.to_thread(router.cli, "call", "--session", "go-fetch", "--json", name, "{}")
    assert out.returncode == 0, out.stderr
    import json

    reply = json.loads(out.stdout)
    url = next(b["url"] for b in reply["results"][0]["output"] if b.get("url"))
    got = await asyncio.to_thread(router.cli, "fetch", "--session", "go-fetch", url)
    assert got.returncode == 0, got.stderr
    assert got.stdout == text


async def test_python_agent_calls_go_toolworker(router, client, session):
    env = {**os.environ, "NATS_URL": router.url}
    proc = subprocess.Popen([str(router.bins["toolworker"]), "--id", "go-toolworker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await wait_listed(client, "word_count")
        reply = await client.call(session, [{"id": "c1", "name": "word_count", "input": {"text": "one two three"}}])
        r = reply.results[0]
        assert r.ok and "3" in r.text, r
    finally:
        proc.terminate()
        proc.wait(20)


async def test_example_worker_py_add(router, client):
    """The README's Python worker and agent (examples/python), as it says: the CLI's call prints
    `py_add: success` and `42`, agent.py prints `42`."""
    env = {**os.environ, "NATS_URL": router.url, "PYTHONPATH": str(ROOT / "python" / "src")}
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "python" / "worker.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await wait_listed(client, "py_add")
        out = await asyncio.to_thread(router.cli, "call", "py_add", '{"a":2,"b":40}')
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ["py_add: success", "42"], out.stdout
        agent = await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "examples" / "python" / "agent.py")],
                                        env=env, capture_output=True, text=True, timeout=120)
        assert agent.returncode == 0, agent.stderr
        assert agent.stdout == "42\n", agent.stdout + agent.stderr
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert "Traceback" not in err, err
