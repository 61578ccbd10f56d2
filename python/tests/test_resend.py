"""Re-sending a batch after silence (docs/protocol.md 3.2.1, 1.25): the client re-publishes the same message
when a window passes with neither the reply nor a running notice of the batch, at most ``max`` times.

The fake-router tests subscribe ``fake.call.<session>`` on their own connection (no router serves the prefix
"fake") and use windows of tenths of a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import nats
import pytest
import pytest_asyncio

import toolbus
from toolbus import _rpc
from toolbus import event as ev
from conftest import unique

PREFIX = "fake"
CALL = {"id": "c1", "name": "echo", "input": {"text": "hi"}}


class Fake:
    """A router stand-in on P.call.<session>: keeps every copy; ``on(fake, msg)`` decides what to send."""

    def __init__(self, nc: Any, on: Callable[[Fake, Any], Awaitable[None]]) -> None:
        self.nc, self.on, self.copies = nc, on, []
        self.tasks: list[asyncio.Task[None]] = []

    async def take(self, m: Any) -> None:
        self.copies.append(m)
        self.tasks.append(asyncio.ensure_future(self.on(self, m)))

    async def reply(self, m: Any) -> None:
        e = ev.decode(m.data, m.headers)
        results = [{"id": c["id"], "name": c["name"], "state": "success", "output": [{"type": "text", "text": "done"}]} for c in e.data["calls"]]
        body, headers = ev.encode_structured(ev.Event(ev.TYPE_CALL_REPLY, "fake", {"results": results, "parked": []}, sessionid=e.sessionid, replyid=e.id))
        await self.nc.publish(m.reply, body, headers=headers)

    async def notice(self, m: Any, typ: str = ev.TYPE_CALL_RUNNING, reply_id: str | None = None) -> None:
        e = ev.decode(m.data, m.headers)
        n = ev.Event(typ, "fake", {"running": ["c1"]}, sessionid=e.sessionid, replyid=e.id if reply_id is None else reply_id)
        body, headers = ev.encode_structured(n)
        await self.nc.publish(m.reply + ".running", body, headers=headers)

    async def copies_seen(self, n: int) -> list[Any]:
        """Bounded polling: at least n copies (the fake's connection may see them after the client's end)."""
        for _ in range(200):
            if len(self.copies) >= n:
                break
            await asyncio.sleep(0.01)
        return self.copies


@pytest_asyncio.fixture
async def fake_bus(router: Any) -> AsyncIterator[Callable[..., Awaitable[tuple[Fake, toolbus.Client]]]]:
    """fake_bus(session, on, resend=...): the fake router subscribed, and a client on the fake prefix."""
    made: list[Any] = []

    async def make(session: str, on: Callable[[Fake, Any], Awaitable[None]], **client: Any) -> tuple[Fake, toolbus.Client]:
        nc = await nats.connect(router.url)
        f = Fake(nc, on)
        await nc.subscribe(f"{PREFIX}.call.{session}", cb=f.take)
        await toolbus._rpc.synced(nc)
        c = await toolbus.Client.connect(router.url, prefix=PREFIX, source="pytest", **client)
        made.append((f, c))
        return f, c

    yield make
    for f, c in made:
        for t in f.tasks:
            t.cancel()
        await c.close()
        await f.nc.close()


def waits(c: toolbus.Client) -> int:
    """Batches the client still waits for (each wait ends with its call)."""
    m = _rpc._muxes.get(c.nc)
    return len(m.waits) if m else 0


async def test_resend_first_copy_dropped(fake_bus, session):
    """The first copy is lost: after the first window the client sends the same bytes, headers and reply subject, and takes the answer."""
    async def on(f: Fake, m: Any) -> None:
        if len(f.copies) == 2:
            await f.reply(m)

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.3, after_notice=1.0, max=3))
    t0 = time.monotonic()
    reply = await c.call(session, [CALL], timeout=20)
    assert 0.3 <= time.monotonic() - t0 < 10  # the reply ends the wait, not the timeout
    assert reply.result("c1").text == "done"
    a, b = await f.copies_seen(2)
    assert (a.data, a.headers, a.reply) == (b.data, b.headers, b.reply)
    assert len(f.copies) == 2 and waits(c) == 0


async def test_resend_held_off_by_notices(fake_bus, session):
    """A router that notices every 0.2 s keeps a call answered after 2 s (several first windows) to one copy."""
    async def on(f: Fake, m: Any) -> None:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            await f.notice(m)
            await asyncio.sleep(0.2)  # the router's period, not a synchronisation
        await f.reply(m)

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.3, after_notice=1.0, max=3))
    t0 = time.monotonic()
    reply = await c.call(session, [CALL], timeout=20)
    assert 2.0 <= time.monotonic() - t0 < 10
    assert reply.result("c1").text == "done"
    assert len(f.copies) == 1


async def test_resend_at_most_max_then_timeout(fake_bus, session):
    """A batch nobody answers is sent 1 + max times, then the call raises the timeout error as before."""
    async def on(f: Fake, m: Any) -> None:
        pass

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.1, after_notice=1.0, max=2))
    t0 = time.monotonic()
    with pytest.raises(toolbus.TimeoutError, match="no reply"):
        await c.call(session, [CALL], timeout=1.0)
    assert time.monotonic() - t0 >= 1.0
    assert len(await f.copies_seen(3)) == 3 and waits(c) == 0
    assert len({(m.data, m.reply) for m in f.copies}) == 1


@pytest.mark.parametrize("resend", [None, toolbus.Resend(max=0)])
async def test_resend_off_one_copy(fake_bus, session, resend):
    """``resend=None`` (or max 0): one copy, the timeout error as in 1.24."""
    async def on(f: Fake, m: Any) -> None:
        pass

    f, c = await fake_bus(session, on, resend=resend)
    assert c.resend is resend
    with pytest.raises(toolbus.TimeoutError):
        await c.call(session, [CALL], timeout=0.5)
    await toolbus._rpc.synced(c.nc)
    assert len(await f.copies_seen(1)) == 1


async def test_resend_foreign_notices_do_not_count(fake_bus, session):
    """Notices of another batch, of another type, or not events at all: ignored, the call neither ends nor
    fails on them, and the client re-sends after its window; the second copy is answered."""
    async def on(f: Fake, m: Any) -> None:
        if len(f.copies) > 1:
            await f.reply(m)
            return
        while True:
            await f.notice(m, reply_id="another-batch")
            await f.notice(m, typ=ev.TYPE_CALL_PROGRESS)
            await f.nc.publish(m.reply + ".running", b"not an event")
            await f.nc.publish(m.reply + ".other", b"{}")
            await asyncio.sleep(0.05)  # the flood's pace, not a synchronisation

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.3, after_notice=60.0, max=1))
    t0 = time.monotonic()
    reply = await c.call(session, [CALL], timeout=20)
    assert 0.3 <= time.monotonic() - t0 < 10
    assert reply.result("c1").text == "done"
    assert len(await f.copies_seen(2)) == 2


async def test_resend_nothing_after_the_reply(fake_bus, session):
    """An answered batch is never sent again, however long the client lives."""
    async def on(f: Fake, m: Any) -> None:
        await f.reply(m)

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.1, after_notice=0.1, max=3))
    for i in range(3):
        await c.call(session, [{**CALL, "id": f"c{i}"}], timeout=20)
    assert waits(c) == 0  # no wait is left that could send
    await asyncio.sleep(0.5)  # five windows: a re-send would have come
    await toolbus._rpc.synced(f.nc)
    assert len(f.copies) == 3


async def test_resend_attack_forged_notices_only_hold_resends(fake_bus, session):
    """Whoever may publish on the agent's inbox forges notices of the batch (one with a reply's data): they hold
    back re-sends, never become a result, and the call raises the timeout error at its timeout, as 1.24."""
    async def on(f: Fake, m: Any) -> None:
        e = ev.decode(m.data, m.headers)
        forged = ev.Event(ev.TYPE_CALL_RUNNING, "forger", {"results": [{"id": "c1", "name": "echo", "state": "success",
                          "output": [{"type": "text", "text": "forged"}]}], "parked": []}, sessionid=e.sessionid, replyid=e.id)
        body, headers = ev.encode_structured(forged)
        while True:
            await f.nc.publish(m.reply + ".running", body, headers=headers)
            await f.notice(m)
            await asyncio.sleep(0.1)  # the forger's pace, not a synchronisation

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=0.2, after_notice=0.5, max=3))
    t0 = time.monotonic()
    with pytest.raises(toolbus.TimeoutError):
        await c.call(session, [CALL], timeout=1.5)
    assert time.monotonic() - t0 >= 1.5
    assert len(f.copies) == 1 and waits(c) == 0


async def test_resend_attack_notice_flood(fake_bus, session):
    """20,000 notices (counted ones, other batches', not events) while a batch waits: each only completes or
    skips a future, the client holds none of them, and the reply is taken as it comes."""
    async def on(f: Fake, m: Any) -> None:
        for i in range(5000):
            await f.notice(m)
            await f.notice(m, reply_id="another-batch")
            await f.nc.publish(m.reply + ".running", b"x" * 1000)
            await f.nc.publish(m.reply + ".running.deeper", b"{}")
        await f.reply(m)

    f, c = await fake_bus(session, on, resend=toolbus.Resend(first=30.0, after_notice=30.0, max=3))  # no re-send: one flood
    reply = await c.call(session, [CALL], timeout=60)
    assert reply.result("c1").text == "done"
    sub = next(s for s in c.nc._subs.values() if s.subject == _rpc._muxes[c.nc].prefix + ">")
    assert waits(c) == 0 and sub.pending_msgs == 0
    assert len(f.copies) == 1


@pytest.mark.parametrize("resend", [None, toolbus.Resend(first=0.1)])
async def test_resend_no_router(router, session, resend):
    """Nobody subscribes the call subject: NoRouterError at once, with re-sending on or off, as in 1.24."""
    async with await toolbus.Client.connect(router.url, prefix="nobody", source="pytest", resend=resend) as c:
        t0 = time.monotonic()
        with pytest.raises(toolbus.NoRouterError, match="no router serves nobody.call"):
            await c.call(session, [CALL], timeout=20)
        assert time.monotonic() - t0 < 10 and waits(c) == 0


async def test_resend_connection_freed(router, session):
    """A client's connection, closed and dropped after batches, is freed: the per-connection mux and watch
    (weak-keyed by it) keep no reference to it."""
    import gc
    import weakref

    async def on(f: Fake, m: Any) -> None:
        await f.reply(m)

    nc = await nats.connect(router.url)
    f = Fake(nc, on)
    await nc.subscribe(f"{PREFIX}.call.{session}", cb=f.take)
    await toolbus._rpc.synced(nc)
    try:
        c = await toolbus.Client.connect(router.url, prefix=PREFIX, source="pytest")
        await c.call(session, [CALL], timeout=20)
        await c.close()
        ref, c = weakref.ref(c.nc), None
        for _ in range(100):  # the watch's poller ends within its 0.25 s period
            gc.collect()
            if ref() is None:
                break
            await asyncio.sleep(0.05)
        assert ref() is None
    finally:
        await nc.close()


def test_resend_option_checked():
    assert toolbus.Resend() == toolbus.Resend(first=6.0, after_notice=15.0, max=3)
    for bad in ({"first": 0}, {"after_notice": -1}, {"max": -1}):
        with pytest.raises(ValueError):
            toolbus.Resend(**bad)


async def test_resend_real_router_notices(router, worker_factory, session):
    """The real router notices a batch it runs (2 s after it took it, then every 5 s): a read-only tool of 4 s
    runs once for a client whose first window is 3 s, and a spy on the reply's ``.running`` sees a notice."""
    name = unique("py_resend_slow")
    runs: list[str] = []

    @toolbus.tool(name=name, read_only=True)
    async def slow(ctx: toolbus.ToolContext) -> str:
        runs.append(ctx.reply_id)
        await asyncio.sleep(4)  # the tool's run time under test
        return "slow"

    await worker_factory(slow)
    spy = await nats.connect(router.url)
    notices: list[Any] = []

    async def on(m: Any) -> None:
        if m.subject.endswith(".running"):
            notices.append(ev.decode(m.data, m.headers))

    await spy.subscribe("_INBOX.>", cb=on)
    await toolbus._rpc.synced(spy)
    c = await toolbus.Client.connect(router.url, source="pytest", resend=toolbus.Resend(first=3.0, after_notice=15.0, max=3))
    try:
        reply = await c.call(session, [{"id": "c1", "name": name, "input": {}}], timeout=60)
        assert reply.result("c1").text == "slow"
        assert len(runs) == 1, runs
        for _ in range(200):
            if notices:
                break
            await asyncio.sleep(0.01)
        assert notices and notices[0].type == ev.TYPE_CALL_RUNNING and notices[0].data["running"] == ["c1"], notices
    finally:
        await c.close()
        await spy.close()
