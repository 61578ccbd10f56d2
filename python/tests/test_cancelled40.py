"""Session 40, cancelled40: a worker's interrupted result names the cancel that ended the call (3.5, 1.30)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import toolbus
from toolbus import event as ev
from toolbus.worker import _Executor, _Served


class _Msg:
    def __init__(self, subject: str, data: bytes, headers: dict[str, str], reply: str = "") -> None:
        self.subject, self.data, self.headers, self.reply = subject, data, headers, reply


class _NC:
    """What the executor uses of a connection: the payload limit and publish, kept."""

    max_payload = 1 << 20

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, Any]] = []

    async def publish(self, subject: str, body: bytes, headers: Any = None) -> None:
        self.sent.append((subject, body, headers))


class _Off:
    async def fit(self, key: str, out: list[Any], extra: int = 0, dup: bool = False) -> list[Any]:
        return out


async def test_interrupted_result_names_cancel() -> None:
    """A call the agent's cancel ends answers interrupted with "cancel": the cancel event's id, so the
    router holds the batch's next run until it has handled that cancel too; a call never cancelled
    answers without the member."""
    entered = asyncio.Event()

    @toolbus.tool(name="slow40", read_only=True)
    async def slow() -> str:
        entered.set()
        await asyncio.sleep(3600)
        return "never"

    nc = _NC()
    x = _Executor(nc, ev.Subjects("toolbus"), "src", logging.getLogger("cancelled40"), _Off(), 4, 5.0, True)  # type: ignore[arg-type]
    s = _Served(slow)
    body, headers = ev.encode_structured(ev.Event(ev.TYPE_EXEC, "router", {"call": {"id": "c1", "name": "slow40", "input": {}}},
                                                  sessionid="s1", replyid="r1", toolcallid="c1"))
    await x.accept(s, _Msg("toolbus.exec.slow40", body, headers, reply="inbox"), None)
    await asyncio.wait_for(entered.wait(), 10)
    cancel = ev.Event(ev.TYPE_CALL_CANCEL, "agent", {"calls": ["c1"]}, sessionid="s1", replyid="r1")
    body, headers = ev.encode_structured(cancel)
    await x.on_cancel(_Msg("toolbus.cancel.s1", body, headers))
    await asyncio.wait_for(asyncio.gather(*x._tasks), 10)
    [(subject, out, _)] = nc.sent
    data = json.loads(out)["data"]
    assert subject == "inbox" and data["state"] == ev.STATE_INTERRUPTED and data["cancel"] == cancel.id, data
