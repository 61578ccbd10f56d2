"""Session 31, red team: a hostile agent against a Python worker, a hostile worker against a Python agent.

Each attack gets a clear error and changes nothing: the worker process keeps serving, no call waits for a
reply that will not come, the tool does not run on what it could not read."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from typing import Any

import nats
import pytest

import toolbus
from conftest import unique
from toolbus import event as ev

DEEP = "[" * 5000 + "]" * 5000  # valid JSON a Go router reads (encoding/json's bound is 10,000), past Python's stack
HUGE = "1" * 5000  # past sys.get_int_max_str_digits (4300), which Python keeps against quadratic conversion


async def raw_call(url: str, session: str, data: str, timeout: float = 20) -> dict:
    """A hostile agent's batch: the JSON text ``data`` sent as it is (no SDK encodes it); the reply's data."""
    nc = await nats.connect(url)
    try:
        body = ('{"specversion":"1.0","id":"%s","source":"attacker","type":"io.toolbus.call.batch",'
                '"datacontenttype":"application/json","sessionid":"%s","data":%s}') % (uuid.uuid4().hex, session, data)
        m = await nc.request(f"toolbus.call.{session}", body.encode(), timeout=timeout)
        return json.loads(m.data)["data"]
    finally:
        await nc.close()


async def test_attack_unreadable_exec(router, worker_factory, session):
    """A batch whose context is nested 5,000 deep (the router takes it and sends it on): json.loads raised
    RecursionError in nats-py's callback, outside the SDK's handling, so the exec was never answered and the call
    ended unknown_outcome three heartbeats later, "may or may not have taken effect" of a tool that never ran. Now
    it is refused at once (bad_event, "nested too deeply"), as an integer of 5,000 digits is; the tool runs
    neither, and the worker serves the next call."""
    name = unique("py_ctx")
    ran: list[Any] = []

    @toolbus.tool(name=name, read_only=True)
    async def probe(ctx: toolbus.ToolContext) -> str:
        ran.append(ctx.context)
        return "ran"

    await worker_factory(probe, heartbeat=5.0)
    for ctx, why in ((DEEP, "nested too deeply for Python"), ('{"n":%s}' % HUGE, "4300 digits")):
        t0 = time.monotonic()
        rep = await raw_call(router.url, session, '{"calls":[{"id":"c1","name":"%s","input":{}}],"context":%s}' % (name, ctx))
        r = rep["results"][0]
        assert r["error"]["code"] == "internal" and "worker refused the call: bad_event" in r["error"]["message"], r
        assert why in r["error"]["message"], r
        assert time.monotonic() - t0 < 5.0, "answered only after the worker's heartbeats"  # the refusal, not the beats
    assert ran == []
    rep = await raw_call(router.url, session, '{"calls":[{"id":"c1","name":"%s","input":{}}],"context":{"ok":1}}' % name)
    assert rep["results"][0]["state"] == "success" and ran == [{"ok": 1}]


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


async def test_attack_dunder_keys(router, worker_factory, session):
    """Keys a Python program may treat specially (``__class__``, ``__init__``, ``self``, ``__proto__``) in an input
    that passes the tool's schema: a dataclass parameter's schema leaves other members open, so they reach the SDK,
    which builds the dataclass from them (a TypeError: the call's tool_error); a pydantic model ignores them; a
    plain tool's schema refuses them (invalid_input). Nothing runs with them and the worker goes on."""
    pyd = pytest.importorskip("pydantic")

    class Model(pyd.BaseModel):
        x: int

    name = unique("py_dunder")
    seen: list[Any] = []

    @toolbus.tool(name=name, read_only=True)
    async def point(p: Point) -> str:
        seen.append(p)
        return f"{p.x},{p.y}"

    @toolbus.tool(name=name + "_m", read_only=True)
    async def model(m: Model) -> str:
        seen.append(m)
        return f"{m.x} {sorted(m.__dict__)}"

    @toolbus.tool(name=name + "_f", read_only=True)
    async def flat(x: int) -> str:
        seen.append(x)
        return str(x)

    await worker_factory(point, model, flat)
    for key in ("__class__", "__init__", "self", "__proto__", "__dict__"):
        rep = await raw_call(router.url, session, json.dumps({"calls": [
            {"id": "c1", "name": name, "input": {"p": {"x": 1, key: {"y": 2}}}},
            {"id": "c2", "name": name + "_m", "input": {"x": 1, key: "z"}},
            {"id": "c3", "name": name + "_f", "input": {"x": 1, key: 1}}]}))
        r1, r2, r3 = rep["results"]
        assert r1["error"]["code"] == "tool_error" and r1["output"][0]["text"].startswith("Error: Point.__init__() got "), r1
        assert r2["state"] == "success" and r2["output"][0]["text"] == "1 ['x']", r2
        assert r3["error"]["code"] == "invalid_input", r3
    assert all(isinstance(s, Model) for s in seen) and len(seen) == 5
    rep = await raw_call(router.url, session, json.dumps({"calls": [{"id": "c1", "name": name, "input": {"p": {"x": 3}}}]}))
    assert rep["results"][0]["output"][0]["text"] == "3,0"


async def test_attack_worker_deep_result(client, router, worker_factory, session):
    """A hostile worker answers a Python agent's call with metadata nested 5,000 deep (the router passes it on
    within its bounds): the agent's ``call`` raised RecursionError from its reply's decoding. Now the reply is a
    ProtocolError naming why, and the agent's next call works."""
    raw = unique("py_deep_result")
    nc = await nats.connect(router.url)
    try:
        async def on(m: Any) -> None:
            x = ev.decode(m.data, m.headers)
            body = ('{"specversion":"1.0","id":"r%s","source":"attacker","type":"io.toolbus.exec.result",'
                    '"sessionid":"%s","replyid":"%s","toolcallid":"%s","datacontenttype":"application/json",'
                    '"data":{"state":"success","output":[{"type":"text","text":"x"}],"metadata":%s}}'
                    ) % (uuid.uuid4().hex, x.sessionid, x.replyid, x.toolcallid, DEEP)
            await nc.publish(m.reply, body.encode())

        await nc.subscribe(f"toolbus.exec.{raw}", queue=f"toolbus-exec-{raw}", cb=on)
        w = await toolbus.Worker.connect(router.url, heartbeat=1.0)
        w.handle({"name": raw, "description": "raw", "input_schema": {"type": "object"}, "read_only": True},
                 lambda ctx: asyncio.sleep(3600))
        await w.start()
        for s in w._tools.values():  # the definition only: the raw responder answers
            await s.sub.unsubscribe()
            s.sub = None
        await toolbus._rpc.synced(nc)
        try:
            with pytest.raises(toolbus.ProtocolError, match="nested too deeply"):
                await client.call(session, [{"id": "c1", "name": raw, "input": {}}], timeout=20)
            reply = await client.call(session, [{"id": "c2", "name": "echo", "input": {"text": "still"}}])
            assert reply.results[0].text == "still"
        finally:
            await w.drain()
    finally:
        await nc.close()


async def test_attack_cancel_flood(router, worker_factory, session):
    """Any agent may publish cancels on its session's ``P.cancel.<s>``, which every Python worker reads (it must
    see a cancel that overtakes its exec), naming call ids of its choosing: each id was remembered for two minutes
    and every cancel scanned them all, so four cancels of 100,000 ids held 400,000 keys in every worker on the bus
    (and a stream of them, quadratic CPU). Now only valid ids are kept, at most ``MAX_CANCELLED``, the oldest going
    first in O(1); a fresh cancel is still remembered, and the worker serves calls."""
    from toolbus import worker as wk

    name = unique("py_cancel_flood")

    @toolbus.tool(name=name, read_only=True)
    async def ok() -> str:
        return "served"

    w = await worker_factory(ok)
    nc = await nats.connect(router.url)
    try:
        for n in range(4):
            ids = [f"f{n}x{i}" for i in range(100_000)] + ["not.an id", "x" * 200]
            e = ev.Event(ev.TYPE_CALL_CANCEL, "attacker", {"calls": ids}, replyid=f"flood{n}", sessionid=session)
            body, headers = ev.encode_structured(e)
            await nc.publish(f"toolbus.cancel.{session}", body, headers=headers)
        legit = ev.Event(ev.TYPE_CALL_CANCEL, "agent", {"calls": ["c1"]}, replyid="late", sessionid=session)
        body, headers = ev.encode_structured(legit)
        await nc.publish(f"toolbus.cancel.{session}", body, headers=headers)
        await toolbus._rpc.synced(nc)
        end = time.monotonic() + 30
        while w._x._was_cancelled(f"{session}.late.c1", session, "late") is None:  # bounded polling: the cancels' delivery
            assert time.monotonic() < end, "the legitimate cancel was not remembered"
            await asyncio.sleep(0.05)
        assert len(w._x._cancelled) <= wk.MAX_CANCELLED, len(w._x._cancelled)
        assert not any(k.endswith(("not.an id", "x" * 200)) for k in w._x._cancelled)
        # Past CANCEL_MEMORY a remembered cancel cuts nothing off, though no cancel came since to drop it.
        at, cancel_id = w._x._cancelled[f"{session}.late.c1"]
        w._x._cancelled[f"{session}.late.c1"] = (at - wk.CANCEL_MEMORY - 1, cancel_id)
        assert w._x._was_cancelled(f"{session}.late.c1", session, "late") is None
    finally:
        await nc.close()
    async with toolbus.Client(await nats.connect(router.url)) as c:
        try:
            reply = await c.call(session, [{"id": "c9", "name": name, "input": {}}])
            assert reply.results[0].text == "served"
        finally:
            await c.nc.close()


async def test_attack_reply_never_comes(router, session):
    """A responder that takes a Python agent's requests and never answers (a hostile or stuck router on another
    prefix) costs the agent only its timeout: each call raises TimeoutError when it is up, and 200 of them leave no
    pending request, subscription or task behind."""
    silent = await nats.connect(router.url)
    c = await toolbus.Client.connect(router.url, prefix="ghost", source="pytest")
    try:
        async def swallow(m: Any) -> None:  # takes every batch, answers none
            pass

        await silent.subscribe("ghost.call.>", cb=swallow)
        await toolbus._rpc.synced(silent)
        with pytest.raises(toolbus.TimeoutError):  # the first request makes nats-py's one reply subscription
            await c.call(session, [{"id": "c0", "name": "echo"}], timeout=0.02)
        subs, tasks = len(c.nc._subs), len(asyncio.all_tasks())
        t0 = time.monotonic()
        for i in range(200):
            with pytest.raises(toolbus.TimeoutError):
                await c.call(session, [{"id": f"c{i}", "name": "echo"}], timeout=0.02)
        assert time.monotonic() - t0 < 60
        assert len(c.nc._resp_map) == 0 and not toolbus._rpc._muxes[c.nc].waits, len(c.nc._resp_map)  # batches wait on the client's own mux (1.25)
        assert len(c.nc._subs) == subs and len(asyncio.all_tasks()) <= tasks, (len(c.nc._subs), subs, len(asyncio.all_tasks()), tasks)
    finally:
        await c.close()
        await c.nc.close()
        await silent.close()
