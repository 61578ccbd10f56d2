"""Session 40, red team of the Python SDK: what one agent's cancels cost every worker (docs/security.md)."""

from __future__ import annotations

import logging
import time
from typing import Any

from toolbus import event as ev
from toolbus.worker import _Call, _Executor


class _Msg:
    def __init__(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.subject, self.data, self.headers = subject, data, headers


async def _cancel_cost(held: int, ids: int) -> float:
    """Seconds a worker holding ``held`` calls spends on one cancel naming ``ids`` made-up ids."""
    x = _Executor(None, ev.Subjects("toolbus"), "src", logging.getLogger("attack40"), None, 64, 5.0, True)  # type: ignore[arg-type]
    for i in range(held):
        k = f"s{i}.r{i}.c{i}"
        x._calls[k] = _Call(k, "t")
    body, headers = ev.encode_structured(ev.Event(ev.TYPE_CALL_CANCEL, "attacker", {"calls": [f"f{i}" for i in range(ids)]},
                                                  sessionid="s1", replyid="r1"))
    t = time.perf_counter()
    await x.on_cancel(_Msg("toolbus.cancel.s1", body, headers))
    return time.perf_counter() - t


async def test_attack_cancel_cost_per_call_held() -> None:
    """Any agent's cancel reaches every worker, naming as many ids as a message holds: the worker
    looked each of its calls in flight up in the list of the cancel's keys, so one cancel of
    20,000 ids cost a worker holding 2,000 calls (``max_concurrent`` raised, or a durable
    backlog) 40 million string comparisons on its event loop, seconds with every call stalled.
    The keys are a dict now: the calls held add next to nothing to the cost of reading the ids."""
    # A cancel of more than MAX_CANCEL_CALLS ids is dropped whole since (test_cancelbound40.py): at the bound.
    base = min([await _cancel_cost(0, ev.MAX_CANCEL_CALLS) for _ in range(3)])
    held = min([await _cancel_cost(20_000, ev.MAX_CANCEL_CALLS) for _ in range(3)])
    assert held < 3 * base + 0.05, (held, base)


async def test_attack_connect_failure_names_no_secret(caplog: Any, capfd: Any) -> None:
    """Held (Java's connect did not, session 40): a worker or client whose url holds a password or a
    token and whose server cannot be reached raises, logs and prints nothing that names the secret
    (nats-py 2.16 tries a refused first connect again and again, whatever its options: it is given
    3 s, and what it printed and logged meanwhile is read)."""
    import asyncio
    import socket

    import toolbus

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    caplog.set_level(logging.DEBUG)
    once = {"max_reconnect_attempts": 0, "allow_reconnect": False, "connect_timeout": 2}
    for url in (f"nats://alice:s3cretpw@127.0.0.1:{port}", f"nats://tok3nsecret@127.0.0.1:{port}"):
        for connect in (lambda: toolbus.Worker.connect(url, nats_options=dict(once)), lambda: toolbus.Client.connect(url, **once)):
            try:
                await asyncio.wait_for(connect(), 3)
                raise AssertionError("connected to a closed port")
            except Exception as err:  # noqa: BLE001 - whatever it raises must not name the secret
                said = f"{err!r} {err} {err.__cause__!r} {err.__context__!r}"
                assert "s3cretpw" not in said and "tok3nsecret" not in said, said
    out, errout = capfd.readouterr()
    for text in (out, errout, caplog.text):
        assert "s3cretpw" not in text and "tok3nsecret" not in text, text
