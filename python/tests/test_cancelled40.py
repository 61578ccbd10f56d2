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


class _WorkNC(_NC):
    """A connection whose routers record every durable result (P.result, 5.8)."""

    is_closed = False

    def __init__(self) -> None:
        super().__init__()
        self.results: list[tuple[str, bytes]] = []

    async def request(self, subject: str, body: bytes, timeout: float = 0, headers: Any = None) -> Any:
        self.results.append((subject, body))
        body, headers = ev.encode_structured(ev.Event(ev.TYPE_EXEC_RECORDED, "router", {"recorded": True}))
        return _Msg("inbox", body, headers)


class _Work(_Msg):
    """A durable call's message from P_WORK: acknowledged once its result is recorded."""

    acked = False

    async def ack_sync(self) -> None:
        self.acked = True


def _exec(call: str, reply: str, tool: str) -> tuple[bytes, dict[str, str]]:
    return ev.encode_structured(ev.Event(ev.TYPE_EXEC, "router", {"call": {"id": call, "name": tool, "input": {}}},
                                         sessionid="s1", replyid=reply, toolcallid=call))


def _cancel(reply: str, *calls: str) -> tuple[ev.Event, _Msg]:
    e = ev.Event(ev.TYPE_CALL_CANCEL, "agent", {"calls": list(calls)} if calls else None, sessionid="s1", replyid=reply)
    body, headers = ev.encode_structured(e)
    return e, _Msg("toolbus.cancel.s1", body, headers)


async def test_remembered_cancel_is_named() -> None:
    """Session 41, java41: a call whose cancel came before its exec request (the worker remembered it)
    never starts, and its interrupted result names that cancel, as a running call's does; a cancel of
    the whole reply counts the same. Before, it named none."""
    ran: list[str] = []

    @toolbus.tool(name="quick41", read_only=True)
    async def quick() -> str:
        ran.append("quick41")
        return "ran"

    nc = _NC()
    x = _Executor(nc, ev.Subjects("toolbus"), "src", logging.getLogger("cancelled41"), _Off(), 4, 5.0, True)  # type: ignore[arg-type]
    s = _Served(quick)
    named, m = _cancel("r1", "c1")
    await x.on_cancel(m)
    whole, m = _cancel("r2")
    await x.on_cancel(m)
    for reply in ("r1", "r2"):
        body, headers = _exec("c1", reply, "quick41")
        await x.accept(s, _Msg("toolbus.exec.quick41", body, headers, reply=reply), None)
    await asyncio.wait_for(asyncio.gather(*x._tasks), 10)
    got = {subject: json.loads(out)["data"] for subject, out, _ in nc.sent}
    assert got == {reply: {"state": ev.STATE_INTERRUPTED, "output": [{"type": "text", "text": ev.INTERRUPTED_TEXT}],
                           "cancel": c.id} for reply, c in (("r1", named), ("r2", whole))}, got
    assert not ran


async def test_durable_result_names_cancel() -> None:
    """Session 41, java41: a durable call (P_WORK, 5.8) the agent's cancel ends records its
    interrupted result on P.result.<tool> with "cancel": the cancel event's id, as a core call answers."""
    entered = asyncio.Event()

    @toolbus.tool(name="job41", read_only=True, durable=True)
    async def job() -> str:
        entered.set()
        await asyncio.sleep(3600)
        return "never"

    nc = _WorkNC()
    x = _Executor(nc, ev.Subjects("toolbus"), "src", logging.getLogger("cancelled41"), _Off(), 4, 5.0, True)  # type: ignore[arg-type]
    s = _Served(job)
    body, headers = _exec("c1", "r1", "job41")
    work = _Work("toolbus.work.job41", body, headers)
    await x.accept(s, work, work)
    await asyncio.wait_for(entered.wait(), 10)
    cancel, m = _cancel("r1", "c1")
    await x.on_cancel(m)
    await asyncio.wait_for(asyncio.gather(*x._tasks), 10)
    [(subject, out)] = nc.results
    data = json.loads(out)["data"]
    assert subject == "toolbus.result.job41" and work.acked, (subject, work.acked)
    assert data == {"state": ev.STATE_INTERRUPTED, "output": [{"type": "text", "text": ev.INTERRUPTED_TEXT}],
                    "cancel": cancel.id}, data
