"""Session 42: a worker's puts share one window of chunks in flight (docs/offload.md, paced writes)."""

from __future__ import annotations

import asyncio

import nats
import pytest

from toolbus.errors import ToolbusError
from toolbus.offload import CHUNK_SIZE, PUT_WINDOW, Offloader
from toolbus.records import Block


async def test_put_window_shared(router, client, session) -> None:
    """Eight puts at once on one Offloader keep at most its window unacknowledged (until session 41
    each put had a chunk of its own in flight: eight puts held eight), and every output reads back
    whole."""
    assert PUT_WINDOW // CHUNK_SIZE == 8
    nc = await nats.connect(router.url)
    try:
        off = Offloader(nc, "toolbus_outputs", inline=1000)
        off._room = asyncio.Semaphore(2)
        most, done = 0, False

        async def sample() -> None:  # nats-py's own count of unacknowledged publishes
            nonlocal most
            while not done:
                if off._js is not None:
                    most = max(most, off._js.publish_async_pending())
                await asyncio.sleep(0)

        sampler = asyncio.create_task(sample())
        texts = [str(i) * ((600 << 10) + i) for i in range(8)]
        outs = await asyncio.gather(*(off.fit(f"{session}.r.c{i}", [Block.text_block(t)]) for i, t in enumerate(texts)))
        done = True
        await sampler
        assert 0 < most <= 2, most
        assert off._room._value == 2  # every put gave its room back
        for out, t in zip(outs, texts):
            assert (await client.fetch(out[1])).decode() == t
    finally:
        await nc.close()


async def test_put_window_freed_on_failure(router) -> None:
    """A put that fails (no store takes its chunks) gives its room back: with a window of one
    chunk a leaked permit would stall every later put of the worker."""
    nc = await nats.connect(router.url)
    try:
        off = Offloader(nc, "missing_outputs", inline=1000)
        off._room = asyncio.Semaphore(1)
        for _ in range(3):
            with pytest.raises(ToolbusError, match="does not exist"):
                await off.fit("s.r.c", [Block.text_block("z" * (3 * CHUNK_SIZE))])
            assert off._room._value == 1
    finally:
        await nc.close()
