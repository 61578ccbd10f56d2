"""Red team, session 32: hostile peers on a Python worker's exec subject (raw NATS protocol to a
real worker through a real nats-server). docs/security.md, "Attacks, and what stops each"."""

from __future__ import annotations

import asyncio
import time

import nats

import toolbus
from conftest import unique
from test_attack_pyperf import compact_exec, raw_request
from toolbus import event as ev


async def test_attack_exec_input_not_an_object(router, worker_factory):
    """An exec whose input is valid JSON but no object (5.1: the input is the object that passed
    the schema) is refused bad_event; the tool never runs with the defaults it used to get."""
    ran: list[str] = []
    name = unique("py_attack32")

    @toolbus.tool(name=name)
    async def wipe(path: str = "/tmp/scratch") -> str:
        ran.append(path)
        return "wiped " + path

    await worker_factory(wipe)
    nc = await nats.connect(router.url)
    try:
        for inp in (b"[1, 2]", b'"x"', b"5", b"true"):
            body = b'{"call":{"id":"c1","name":"%s","input":%s},"attempt":1}' % (name.encode(), inp)
            m = await raw_request(router.url, nc, f"toolbus.exec.{name}", compact_exec(name, **{"content-type": b"application/json"}), body)
            e = ev.decode(m.data, m.headers)
            assert e.type == ev.TYPE_ERROR and e.data["code"] == "bad_event", (inp, e.data)
            assert "call.input must be an object" in e.data["message"], e.data
        assert ran == []
        body = b'{"call":{"id":"c1","name":"%s","input":{"path":"/tmp/x"}},"attempt":1}' % name.encode()
        m = await raw_request(router.url, nc, f"toolbus.exec.{name}", compact_exec(name, **{"content-type": b"application/json"}), body)
        assert ev.decode(m.data, m.headers).data["output"] == [{"type": "text", "text": "wiped /tmp/x"}]
    finally:
        await nc.close()


async def test_attack_exec_deadline_past_and_far(router, worker_factory):
    """A deadline in the past ends the call at once as the deadline's error; one in year 9999 is an
    ordinary call (the timer takes it), and the worker serves the next call."""
    name = unique("py_attack32")
    started = asyncio.Event()

    @toolbus.tool(name=name, read_only=True)
    async def slow(n: int = 0) -> str:
        if n:
            started.set()
            await asyncio.sleep(3600)
        return "ok"

    await worker_factory(slow)
    nc = await nats.connect(router.url)
    try:
        body = b'{"call":{"id":"c1","name":"%s","input":{"n":1}},"attempt":1}' % name.encode()
        past = compact_exec(name, **{"ce-expirytime": ev.rfc3339(time.time() - 3600).encode(), "content-type": b"application/json"})
        m = await raw_request(router.url, nc, f"toolbus.exec.{name}", past, body)
        d = ev.decode(m.data, m.headers).data
        assert d["state"] == "error" and "deadline" in d["output"][0]["text"], d
        far = compact_exec(name, **{"ce-expirytime": b"9999-12-31T23:59:59Z", "content-type": b"application/json"})
        body = b'{"call":{"id":"c2","name":"%s","input":{}},"attempt":1}' % name.encode()
        m = await raw_request(router.url, nc, f"toolbus.exec.{name}", far, body)
        assert ev.decode(m.data, m.headers).data["output"] == [{"type": "text", "text": "ok"}]
    finally:
        await nc.close()


async def test_attack_exec_flood_bounded(router, worker_factory):
    """10,000 execs at once on one tool's subject: at most max_concurrent run (5.x, as the Go
    worker's bound), the worker holds no task or call per exec beyond them (nats-py keeps at most
    max(4 * max_concurrent, 1024) waiting and drops the rest, unanswered: those calls end as a
    vanished worker's, 5.7), and once the flood is over it serves a call."""
    name = unique("py_attack32")
    release = asyncio.Event()
    running = peak = 0

    @toolbus.tool(name=name, read_only=True)
    async def hold(n: int = 0) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            if n:
                await release.wait()
            return "ok"
        finally:
            running -= 1

    w = await worker_factory(hold, max_concurrent=4)
    nc = await nats.connect(router.url)
    try:
        inbox = nc.new_inbox()
        for i in range(10_000):
            e = ev.Event(ev.TYPE_EXEC, "attacker", {"call": {"id": f"c{i}", "name": name, "input": {"n": 1}}, "attempt": 1},
                         sessionid="s1", replyid="r1", toolcallid=f"c{i}", expirytime=ev.rfc3339(time.time() + 60))
            body, headers = ev.encode_structured(e)
            await nc.publish(f"toolbus.exec.{name}", body, reply=inbox, headers=headers)
        await toolbus._rpc.synced(nc)
        for _ in range(500):  # bounded polling: the first four run
            if peak >= 4:
                break
            await asyncio.sleep(0.01)
        assert peak == 4 and len(w._x._tasks) <= 4 and len(w._x._calls) <= 5, (peak, len(w._x._tasks), len(w._x._calls))
        release.set()
        sub = w._tools[name].sub
        for _ in range(6000):  # bounded polling: the backlog nats-py kept (the rest it dropped) is served
            if sub.pending_msgs == 0 and not w._x._tasks:
                break
            await asyncio.sleep(0.01)
        assert sub.pending_msgs == 0, sub.pending_msgs
        e = ev.Event(ev.TYPE_EXEC, "agent", {"call": {"id": "last", "name": name, "input": {}}, "attempt": 1},
                     sessionid="s2", replyid="r2", toolcallid="last", expirytime=ev.rfc3339(time.time() + 60))
        body, headers = ev.encode_structured(e)
        m = await nc.request(f"toolbus.exec.{name}", body, headers=headers, timeout=60)
        assert ev.decode(m.data, m.headers).data["output"] == [{"type": "text", "text": "ok"}]
        assert peak == 4
    finally:
        await nc.close()


async def test_attack_forged_reply_ids(router):
    """A responder on P.call.<session> that answers before the router (3.2: each call once,
    finished or parked): a result for a call never sent, two results for one call, or a call
    left out make Client.call raise ProtocolError (prefix "forged": no router answers there), and
    the reply it should take is taken."""
    from toolbus import Client
    from toolbus.errors import ProtocolError
    import pytest

    ok = {"id": "c1", "name": "t", "state": "success", "output": [{"type": "text", "text": "forged"}]}
    session = unique("forged").replace("_", "-")
    for results in ([{**ok, "id": "other"}], [ok, ok], [], [ok, {**ok, "id": "c2"}], [ok]):
        nc = await nats.connect(router.url)
        try:
            async def answer(msg, results=results):
                e = ev.Event(ev.TYPE_CALL_REPLY, "attacker", {"results": results, "parked": []}, sessionid=session, replyid="r")
                body, headers = ev.encode_structured(e)
                await nc.publish(msg.reply, body, headers=headers)

            await nc.subscribe(f"forged.call.{session}", cb=answer)
            await toolbus._rpc.synced(nc)
            async with await Client.connect(router.url, prefix="forged") as c:
                if results == [ok]:
                    assert (await c.call(session, [{"id": "c1", "name": "t", "input": {}}], timeout=10)).results[0].id == "c1"
                    continue
                with pytest.raises(ProtocolError, match="each call of the batch once"):
                    await c.call(session, [{"id": "c1", "name": "t", "input": {}}], timeout=10)
        finally:
            await nc.close()
