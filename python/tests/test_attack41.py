"""Session 41, redteam41: java41's remembered cancel id attacked in the Python worker."""

from __future__ import annotations

import logging
import tracemalloc

import pytest

from toolbus import event as ev
from toolbus import worker as wk
from toolbus.worker import _Executor


class _Msg:
    def __init__(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.subject, self.data, self.headers = subject, data, headers


async def test_attack41_cancel_memory_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent fills a worker's memory of cancels with the largest keys and ids it may send: 128-character
    session, reply and call ids, one call a cancel so that each key keeps its own 128-character cancel id,
    and goes on past the bound. The memory holds MAX_CANCELLED keys and stays put once full: measured
    ~0.8 KiB a key, ~48 MiB in all (tracemalloc; the bound is asserted, not the figure). The test runs
    with the bound at 4,096 keys: the full 65,536 under tracemalloc took 43-80 s on a busy machine."""
    monkeypatch.setattr(wk, "MAX_CANCELLED", 4096)
    x = _Executor(None, ev.Subjects("toolbus"), "src", logging.getLogger("attack41"), None, 64, 5.0, True)  # type: ignore[arg-type]
    session, reply = "s" * 128, "r" * 128

    async def cancel(i: int) -> None:
        e = ev.Event(ev.TYPE_CALL_CANCEL, "attacker", {"calls": [f"{i:0128d}"]}, sessionid=session, replyid=reply)
        e.id = f"{i:0127d}x"
        body, headers = ev.encode_structured(e)
        await x.on_cancel(_Msg(f"toolbus.cancel.{session}", body, headers))

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        i = 0
        while i < wk.MAX_CANCELLED:
            await cancel(i)
            i += 1
        full = tracemalloc.get_traced_memory()[0] - base
        while i < wk.MAX_CANCELLED * 3 // 2:
            await cancel(i)
            i += 1
        after = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(x._cancelled) == wk.MAX_CANCELLED
    assert x._was_cancelled(f"{session}.{reply}.{i - 1:0128d}", session, reply) == f"{i - 1:0127d}x"
    per_key = full / wk.MAX_CANCELLED
    print(f"full: {full / 2**20:.1f} MiB ({per_key:.0f} B a key); after 1.5x: {after / 2**20:.1f} MiB")
    assert per_key < 2048, per_key
    assert after < full * 1.25, (full, after)
