"""Session 42, redteam42b: a put whose acknowledgements never come must not hold the worker's shared window."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import toolbus.offload as offload
from toolbus.errors import ToolbusError
from toolbus.offload import CHUNK_SIZE, PUT_WINDOW, Offloader
from toolbus.records import Block


async def test_stalled_put_frees_the_window(router, monkeypatch) -> None:
    """A store that takes one object's chunks and never acknowledges them: that put fills the window
    (shared by the connection's puts since 1.32); before the fix it held it for PUT_TIMEOUT (2 minutes)
    and another call's put waited as long. Now a chunk is awaited ACK_WAIT, the stalled put fails and
    gives its room back, and the other put is stored."""
    monkeypatch.setattr(offload, "ACK_WAIT", 1.0)
    bucket = "stall42b_outputs"
    store = await nats.connect(router.url)
    nc = await nats.connect(router.url)
    stalled: list[str] = []
    seq = 0

    async def answer(m) -> None:  # acknowledges every publish but the first object's chunks
        nonlocal seq
        prefix = f"$O.{bucket}.C."
        if m.subject.startswith(prefix):
            token = m.subject[len(prefix):]
            if not stalled:
                stalled.append(token)
            if token == stalled[0]:
                return
        seq += 1
        await m.respond(json.dumps({"stream": f"OBJ_{bucket}", "seq": seq}).encode())

    try:
        await store.subscribe(f"$O.{bucket}.>", cb=answer)
        await store.flush()
        off = Offloader(nc, bucket, inline=1000)
        big = asyncio.create_task(off.fit("s.r.big", [Block.text_block("b" * (PUT_WINDOW + CHUNK_SIZE))]))
        for _ in range(2000):  # bounded polling: the stalled put fills the window at once
            if off._room.locked():
                break
            await asyncio.sleep(0.005)
        assert off._room.locked()
        out = await asyncio.wait_for(off.fit("s.r.small", [Block.text_block("s" * 4000)]), 4 * offload.ACK_WAIT)
        assert out[1].url
        with pytest.raises(ToolbusError, match="not acknowledged"):
            await big
        assert off._room._value == PUT_WINDOW // CHUNK_SIZE  # every put gave its room back
    finally:
        await nc.close()
        await store.close()
