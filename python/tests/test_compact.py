"""Protocol 1.16's compact exec (docs/protocol.md 5.1, 5.2, 7.1): a Python worker declares
``compact_exec``, gets the compact exec from a real router, alone or beside a Go worker, and answers it
with the four headers CloudEvents requires; a compact exec with a bad attribute is refused as section 1
says; ``compact_exec=False`` keeps the 1.15 binary form."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from typing import Any

import nats

import toolbus
from conftest import unique
from test_same_wire import exec_event
from toolbus import event as ev

REQUIRED = {"ce-specversion", "ce-id", "ce-source", "ce-type"}
COMPACT_EXEC = REQUIRED | {"ce-sessionid", "ce-replyid", "ce-toolcallid", "ce-expirytime"}


class Wire:
    """Watches a tool's execs and the answers to them on their reply inboxes."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.execs: list[Any] = []
        self.answers: dict[str, Any] = {}

    async def watch(self, tool: str) -> Wire:
        async def on_exec(m: Any) -> None:
            self.execs.append(m)

        async def on_inbox(m: Any) -> None:
            self.answers[m.subject] = m

        await self.nc.subscribe(f"toolbus.exec.{tool}", cb=on_exec)
        await self.nc.subscribe("_INBOX.>", cb=on_inbox)
        await toolbus._rpc.synced(self.nc)
        return self

    async def exec(self, n: int) -> Any:
        """The n-th exec seen (from 1), by bounded polling: the watcher's connection is not the
        worker's, so under load it may see the exec after the agent has its reply."""
        for _ in range(200):
            if len(self.execs) >= n:
                return self.execs[n - 1]
            await asyncio.sleep(0.05)
        raise AssertionError(f"saw {len(self.execs)} execs, not {n}")

    async def answer(self, exec_msg: Any) -> Any:
        """The answer to exec_msg, by bounded polling (the watcher may see it after the agent's reply)."""
        for _ in range(200):
            if exec_msg.reply in self.answers:
                return self.answers[exec_msg.reply]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no answer seen on {exec_msg.reply}")


def word_count_tool() -> Any:
    @toolbus.tool(name=unique("py_compact"), read_only=True)
    async def count(text: str) -> str:
        """Count words."""
        return str(len(text.split()))

    return count


async def test_compact_exec_answered_with_four_headers(router, client, worker_factory, session):
    tool = word_count_tool()
    w = await worker_factory(tool)
    assert w.registration()["compact_exec"] is True
    nc = await nats.connect(router.url)
    try:
        wire = await Wire(nc).watch(tool.name)
        reply = await client.call(session, [{"id": "c1", "name": tool.name, "input": {"text": "a b c"}}])
        assert reply.result("c1").text == "3", reply
        x = await wire.exec(1)
        assert set(x.headers) == COMPACT_EXEC, x.headers
        a = await wire.answer(x)
        assert set(a.headers) == REQUIRED, a.headers
        assert a.headers["ce-type"] == ev.TYPE_EXEC_RESULT and a.headers["ce-source"] == w.source
        assert json.loads(a.data) == {"state": "success", "output": [{"type": "text", "text": "3"}]}
    finally:
        await nc.close()


async def test_compact_off_answers_binary(router, client, worker_factory, session):
    tool = word_count_tool()
    w = await worker_factory(tool, compact_exec=False)
    reg = w.registrations()[0][1]
    assert reg["binary_exec"] is True and "compact_exec" not in reg, reg
    assert "compact_exec" not in toolbus.Worker(None, binary_exec=False, compact_exec=True).registration()
    nc = await nats.connect(router.url)
    try:
        wire = await Wire(nc).watch(tool.name)
        reply = await client.call(session, [{"id": "c1", "name": tool.name, "input": {"text": "a b"}}])
        assert reply.result("c1").text == "2", reply
        x = await wire.exec(1)
        assert x.headers["content-type"] == ev.CONTENT_TYPE_JSON and "ce-time" in x.headers, x.headers
        a = await wire.answer(x)
        assert a.headers["content-type"] == ev.CONTENT_TYPE_JSON and a.headers["ce-toolcallid"] == "c1", a.headers
    finally:
        await nc.close()


async def test_mixed_fleet_with_go_worker_gets_compact(router, client, session):
    """A Go worker and a Python worker serve one tool: the router sends compact to both."""
    nc = await nats.connect(router.url)
    go_def: dict[str, Any] = {}

    async def on_register(m: Any) -> None:
        d = ev.decode(m.data, m.headers).data
        if isinstance(d, dict) and d.get("tools"):
            go_def.setdefault("def", d["tools"][0])

    await nc.subscribe("toolbus.register.word_count", cb=on_register)
    await toolbus._rpc.synced(nc)
    go = subprocess.Popen([str(router.bins["toolworker"]), "--id", "go-mixed"], env={**os.environ, "NATS_URL": router.url},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    w = None
    try:
        for _ in range(600):
            if "def" in go_def:
                break
            await asyncio.sleep(0.05)

        async def count(ctx: toolbus.ToolContext) -> str:
            return json.dumps({"words": len(ctx.input["text"].split())}, separators=(",", ":"))

        w = await toolbus.Worker.connect(router.url, id="py-mixed", heartbeat=1.0)
        w.handle(go_def["def"], count)
        await w.start()
        assert w.accepted == ["word_count"], (w.accepted, w.rejected)
        kv = await nc.jetstream().key_value("toolbus_workers")
        beats = {k: json.loads((await kv.get(f"word_count.{k}")).value) for k in ("go-mixed", "py-mixed")}
        assert all(b.get("binary") is True and b.get("compact") is True for b in beats.values()), beats
        wire = await Wire(nc).watch("word_count")
        sources: set[str] = set()
        for i in range(200):
            if len(sources) == 2:
                break
            reply = await client.call(session, [{"id": f"c{i}", "name": "word_count", "input": {"text": "x y"}}])
            assert reply.result(f"c{i}").text == '{"words":2}', reply
            x = await wire.exec(i + 1)
            assert set(x.headers) == COMPACT_EXEC, x.headers
            a = await wire.answer(x)
            assert set(a.headers) == REQUIRED, a.headers
            sources.add(a.headers["ce-source"])
        assert sources == {"toolbus/worker/go-mixed", "toolbus/worker/py-mixed"}, sources
    finally:
        go.terminate()
        go.wait(20)
        if w is not None:
            await w.drain()
        await nc.close()


async def test_compact_exec_bad_attributes_refused(router, worker_factory):
    """A compact exec with a bad id or a non-UTF-8 header gets bad_event, as in binary mode (1)."""
    tool = word_count_tool()
    await worker_factory(tool)
    nc = await nats.connect(router.url)
    try:
        good = exec_event(tool.name, "c1")
        body, headers = ev.encode_binary(good)
        compact = {k: v for k, v in headers.items() if k in COMPACT_EXEC}
        m = await nc.request(f"toolbus.exec.{tool.name}", body, timeout=10, headers=compact)
        assert set(m.headers) == REQUIRED and json.loads(m.data)["output"] == [{"type": "text", "text": "3"}], m.headers
        for bad, why in (({"ce-sessionid": "a.b"}, 'sessionid "a.b" must match'),
                         ({"ce-toolcallid": "%FF"}, "header ce-toolcallid is not UTF-8"),
                         ({"ce-replyid": "%zz"}, "header ce-replyid: invalid URL escape")):
            m = await nc.request(f"toolbus.exec.{tool.name}", body, timeout=10, headers={**compact, **bad})
            e = ev.decode(m.data, m.headers)
            assert e.type == ev.TYPE_ERROR and e.data["code"] == "bad_event" and why in e.data["message"], (bad, e.data)
    finally:
        await nc.close()
