"""The Python client's re-sending after silence with many batches waiting (docs/protocol.md 3.2.1).

    .cache/venv/bin/python python/bench/bench_silence.py [--waits 10000]

With a fake connection (publishes counted, nothing answers): the event loop's cost per tick with
that many batches waiting in toolbus._rpc._resending and none due, against none waiting; then as
many batches whose 0.5 s windows all end within a tenth of a second, and the process's CPU per
re-send. Each batch waits on asyncio's own timers, so a tick costs what is due, not a walk.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from toolbus import _rpc


class FakeConn:
    def __init__(self) -> None:
        self.sent = 0

    def new_inbox(self) -> str:
        return "_INBOX.bench"

    async def subscribe(self, subject: str, cb: Any) -> None:
        pass

    async def publish(self, subject: str, body: bytes, reply: str = "", headers: Any = None) -> None:
        self.sent += 1


async def tick(n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        await asyncio.sleep(0)
    return (time.perf_counter() - t) / n


async def batches(nc: FakeConn, n: int, r: _rpc.Resend, sends: int) -> list[asyncio.Future[Any]]:
    ts = [asyncio.ensure_future(_rpc._resending(nc, "s", b"x", {}, 3600, "r", r)) for _ in range(n)]
    while nc.sent < sends:
        await asyncio.sleep(0.001)
    return ts


async def main(n: int) -> None:
    nc = FakeConn()
    idle = min([await tick(20000) for _ in range(5)])
    ts = await batches(nc, n, _rpc.Resend(first=600, after_notice=600, max=3), n)
    busy = min([await tick(20000) for _ in range(5)])
    print(f"{n} waiting, none due: a loop tick {busy * 1e6:.2f} us (none waiting: {idle * 1e6:.2f} us)")
    for t in ts:
        t.cancel()
    await asyncio.gather(*ts, return_exceptions=True)
    nc.sent = 0
    ts = await batches(nc, n, _rpc.Resend(first=0.5, after_notice=600, max=1), n)
    cpu = time.process_time()
    await batches(nc, 0, _rpc.Resend(), 2 * n)
    cpu = time.process_time() - cpu
    print(f"{n} due within 0.1 s: {cpu * 1e3:.0f} ms of CPU from the first sends to the last re-send, {cpu / n * 1e6:.0f} us a re-send")
    for t in ts:
        t.cancel()
    await asyncio.gather(*ts, return_exceptions=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--waits", type=int, default=10000)
    asyncio.run(main(p.parse_args().waits))
