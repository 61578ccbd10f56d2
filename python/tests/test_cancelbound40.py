"""Session 40, cancelbound40: a cancel names at most MAX_CANCEL_CALLS ids (3.5); a worker drops a longer one whole."""

from __future__ import annotations

import logging

import pytest

from toolbus import event as ev
from toolbus.client import Client
from toolbus.errors import ProtocolError
from toolbus.worker import _Call, _Executor


class _Msg:
    def __init__(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.subject, self.data, self.headers = subject, data, headers


def _cancel(session: str, reply: str, ids: list[str]) -> _Msg:
    body, headers = ev.encode_structured(ev.Event(ev.TYPE_CALL_CANCEL, "attacker", {"calls": ids},
                                                  sessionid="s1", replyid=reply))
    return _Msg(f"toolbus.cancel.{session}", body, headers)


async def test_attack_cancel_bound() -> None:
    """Any agent's cancel reaches every worker. One naming 90,000 made-up ids (1 MiB) was read id by
    id (0.5-0.7 s of the event loop) and pushed 65,536 keys into the worker's memory of cancels,
    evicting every real one; a session or reply id of 4 KiB made every key that long. Now a cancel
    naming more than MAX_CANCEL_CALLS ids, or under an id no call may have, changes nothing:
    counted, not timed."""
    x = _Executor(None, ev.Subjects("toolbus"), "src", logging.getLogger("cancelbound40"), None, 64, 5.0, True)  # type: ignore[arg-type]
    await x.on_cancel(_cancel("s1", "r1", ["real"]))
    held = x._calls["s1.r1.c5"] = _Call("s1.r1.c5", "t")
    over = [f"c{i}" for i in range(ev.MAX_CANCEL_CALLS + 1)]
    for name, m in {"max payload": _cancel("s1", "r1", [f"c{i}" for i in range(90_000)]),
                    "one id over": _cancel("s1", "r1", over),
                    "session too long": _cancel("s" * 4000, "r1", ["c5"]),
                    "reply id too long": _cancel("s1", "r" * 4000, ["c5"])}.items():
        await x.on_cancel(m)
        assert list(x._cancelled) == ["s1.r1.real"] and not held.cancelled, (name, len(x._cancelled))
    await x.on_cancel(_cancel("s1", "r1", over[:ev.MAX_CANCEL_CALLS]))
    assert len(x._cancelled) == 1 + ev.MAX_CANCEL_CALLS and held.cancelled


async def test_client_refuses_a_cancel_over_the_bound() -> None:
    """The client refuses a cancel routers and workers would drop whole, and sends nothing (as the Go
    and Java clients do); one of exactly MAX_CANCEL_CALLS ids is sent (session 41)."""
    sent: list[tuple[str, bytes]] = []

    class _Conn:
        async def publish(self, subject: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            sent.append((subject, body))

        async def flush(self) -> None:
            pass

    c = Client(_Conn())
    ids = [f"c{i}" for i in range(ev.MAX_CANCEL_CALLS + 1)]
    with pytest.raises(ProtocolError, match="at most 1024"):
        await c.cancel("s1", "r1", ids)
    assert sent == []
    await c.cancel("s1", "r1", ids[:-1])
    assert [s for s, _ in sent] == ["toolbus.cancel.s1"]
