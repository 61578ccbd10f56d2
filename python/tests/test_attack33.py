"""Red team, session 33: a hostile router against a Python agent (raw NATS through a real
nats-server, on a prefix no real router serves). docs/security.md, "Attacks, and what stops each"."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import nats
import pytest

import toolbus
from toolbus import client as tbclient
from toolbus import event as ev

PREFIX = "hostile33"


async def serve(nc: nats.NATS, subject: str, answer) -> None:
    """Answers each request on subject with answer(event) -> data of an io.toolbus.output.chunk."""
    async def on(m) -> None:
        body, headers = ev.encode_structured(ev.Event(ev.TYPE_OUTPUT_CHUNK, "evil", answer(ev.decode(m.data, m.headers))))
        await nc.publish(m.reply, body, headers=headers)

    await nc.subscribe(subject, cb=on)
    await toolbus._rpc.synced(nc)


async def test_attack_fetch_size_past_ceiling(router) -> None:
    """An output.chunk saying the object is 1 TiB (or sending bytes past the size it said) is refused
    at once: fetch used to keep asking for windows and keep their bytes until the size was reached."""
    evil = await nats.connect(router.url)
    c = toolbus.Client(await nats.connect(router.url), prefix=PREFIX, timeout=5)
    try:
        data = b"x" * 1024
        digest = hashlib.sha256(data).hexdigest()
        asked: list[int] = []

        def huge(e: ev.Event) -> dict:
            asked.append(e.data["offset"])
            return {"size": 1 << 40, "digest": digest, "offset": e.data["offset"], "data": base64.b64encode(data).decode()}

        await serve(evil, f"{PREFIX}.outputs.s1", huge)
        url = f"nats-object://toolbus_outputs/s1.r.c#sha256={digest}"
        with pytest.raises(toolbus.ProtocolError, match="past the output ceiling"):
            await c.fetch(url)
        assert asked == [0]

        def over(e: ev.Event) -> dict:
            return {"size": 10, "digest": digest, "offset": e.data["offset"], "data": base64.b64encode(data).decode()}

        await serve(evil, f"{PREFIX}.outputs.s2", over)
        with pytest.raises(toolbus.ProtocolError, match="past the object's size"):
            await c.fetch(url.replace("/s1.", "/s2."))
    finally:
        await c.nc.close()
        await evil.close()


async def test_attack_event_flood_bounded(router) -> None:
    """5,000 events of 2 KiB on a session's events subject while the reader reads none: the
    stream holds at most 1024 (the Go client's Watch bound), counts the rest dropped, and reads
    on afterwards."""
    evil = await nats.connect(router.url)
    c = toolbus.Client(await nats.connect(router.url), prefix=PREFIX)
    try:
        async with c.events("s1") as stream:
            body, headers = ev.encode_structured(ev.Event(ev.TYPE_CALL_PROGRESS, "evil", {"output": [{"type": "text", "text": "y" * 2048}]},
                                                          sessionid="s1"))
            for _ in range(5000):
                await evil.publish(f"{PREFIX}.events.s1", body, headers=headers)
            await toolbus._rpc.synced(evil)
            loop = asyncio.get_running_loop()
            end = loop.time() + 60
            while stream._q.qsize() + stream.dropped < 5000 and loop.time() < end:
                await asyncio.sleep(0.01)  # bounded polling: the subscription's callback is behind
            assert stream._q.qsize() == tbclient.EVENTS_WAITING, (stream._q.qsize(), stream.dropped)
            assert stream.dropped == 5000 - tbclient.EVENTS_WAITING
            e = await stream.next(timeout=1)
            assert e.type == ev.TYPE_CALL_PROGRESS
    finally:
        await c.nc.close()
        await evil.close()
