"""Interop with JavaScript (examples/js, written from docs/protocol.md alone): a Python agent calls the
JS worker, a JS agent calls a Python worker. Skipped without node and npm or registry access."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess

import pytest

import toolbus
from conftest import ROOT, unique
from test_interop import wait_listed

JS = ROOT / "examples" / "js"
AGENT = """
import { open, event, request, P } from "./lib.mjs";
const [session, tool, input] = [process.argv[2], process.argv[3], JSON.parse(process.argv[4])];
const nc = await open();
const reply = await request(nc, `${P}.call.${session}`,
  event("io.toolbus.call.batch", "js-agent", { calls: [{ id: "c1", name: tool, input }], user: "js" }, { sessionid: session }), 30000);
console.log(JSON.stringify(reply.data));
await nc.close();
"""


@pytest.fixture(scope="session")
def js_dir() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the JavaScript interop tests")
    d = ROOT / ".cache" / "js"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "node_modules" / "@nats-io" / "transport-node").exists():
        pkgs = json.loads((JS / "package.json").read_text())["dependencies"]
        r = subprocess.run([npm, "install", "--prefix", str(d), "--no-audit", "--no-fund", "--loglevel", "error",
                            *[f"{k}@{v}" for k, v in pkgs.items()]], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "npm_config_update_notifier": "false"})
        if r.returncode != 0:
            pytest.skip(f"npm install failed (no registry access?): {r.stderr[-500:]}")
    for f in ("lib.mjs", "worker.mjs"):
        shutil.copy(JS / f, d / f)
    (d / "py_agent.mjs").write_text(AGENT)
    (d / "package.json").write_text('{"type": "module", "private": true}')
    return str(d)


async def test_python_agent_calls_js_worker(router, client, session, js_dir):
    env = {**os.environ, "NATS_URL": router.url, "WORKER_ID": "js-worker", "HEARTBEAT_MS": "1000"}
    proc = subprocess.Popen(["node", "worker.mjs"], cwd=js_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await wait_listed(client, "js_add")
        reply = await client.call(session, [toolbus.Call("c1", "js_add", '{"a": 2, "b": 40}')])
        r = reply.results[0]
        assert r.ok and r.text == "2 + 40 = 42", r
    finally:
        proc.terminate()
        proc.wait(20)


async def test_js_agent_calls_python_worker(router, worker_factory, js_dir):
    name = unique("py_for_js")

    @toolbus.tool(name=name, read_only=True)
    async def shout(text: str, ctx: toolbus.ToolContext) -> str:
        return f"{text.upper()} ({ctx.user})"

    await worker_factory(shout)
    out = await asyncio.to_thread(subprocess.run, ["node", "py_agent.mjs", "js-to-py", name, '{"text": "hi from js"}'],
                                  cwd=js_dir, env={**os.environ, "NATS_URL": router.url}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["results"][0]["state"] == "success"
    assert data["results"][0]["output"] == [{"type": "text", "text": "HI FROM JS (js)"}]
