"""Red team, session 25: what session 24's fast decoding (``pyperf``) of received events must still
refuse, sent as raw NATS protocol to a real Python worker through a real nats-server, each answered
``bad_event`` without running the tool: a header value that is not UTF-8 (nats-py turns the bytes
into U+FFFD), a time that is no RFC 3339 date (February 30), a non-object data, a missing attribute,
a bad id. docs/security.md, "Attacks, and what stops each"."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlparse

import nats

import toolbus
from conftest import unique
from toolbus import event as ev


async def raw_request(url: str, nc: Any, subject: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
    """Publish one message with header lines exactly as given (bytes, repeats kept) from a raw
    connection, and return the reply that nc receives on a fresh inbox."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    await toolbus._rpc.synced(nc)
    u = urlparse(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    try:
        await reader.readline()  # INFO
        hdr = b"NATS/1.0\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
        writer.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n')
        writer.write(b"HPUB %s %s %d %d\r\n" % (subject.encode(), inbox.encode(), len(hdr), len(hdr) + len(body)))
        writer.write(hdr + body + b"\r\nPING\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        assert line == b"PONG\r\n", line
        return await sub.next_msg(timeout=10)
    finally:
        writer.close()


def compact_exec(tool: str, **over: bytes) -> list[tuple[bytes, bytes]]:
    h = {"ce-specversion": b"1.0", "ce-id": b"x1", "ce-source": b"toolbus/router/r", "ce-type": ev.TYPE_EXEC.encode(),
         "ce-sessionid": b"s1", "ce-replyid": b"r1", "ce-toolcallid": b"c1",
         "ce-expirytime": ev.rfc3339(time.time() + 30).encode()}
    h.update(over)
    return [(k.encode(), v) for k, v in h.items() if v is not None]


async def test_attack_pyperf_exec_refused(router, worker_factory):
    ran: list[str] = []
    name = unique("py_attack")

    @toolbus.tool(name=name, read_only=True)
    async def count(text: str) -> str:
        ran.append(text)
        return str(len(text.split()))

    await worker_factory(count)
    body = b'{"call":{"id":"c1","name":"%s","input":{"text":"a b"}},"attempt":1}' % name.encode()
    nc = await nats.connect(router.url)
    try:
        m = await raw_request(router.url, nc, f"toolbus.exec.{name}", compact_exec(name), body)
        assert ev.decode(m.data, m.headers).data["output"] == [{"type": "text", "text": "2"}]
        assert ran == ["a b"]
        for why, headers, data in (
            ("header ce-source is not UTF-8", compact_exec(name, **{"ce-source": b"src\xff"}), body),
            ("header ce-replyid is not UTF-8", compact_exec(name, **{"ce-replyid": b"r\xc3\x28"}), body),
            ("expirytime", compact_exec(name, **{"ce-expirytime": b"2030-02-30T00:00:00Z"}), body),
            ("expirytime", compact_exec(name, **{"ce-expirytime": b"2031-04-31T00:00:00Z"}), body),
            ("expirytime", compact_exec(name, **{"ce-expirytime": b"2100-02-29T00:00:00Z"}), body),
            ("time", compact_exec(name, **{"ce-time": b"2027-02-29T12:00:00.5+01:00"}), body),
            ("data: the call is missing", compact_exec(name), b'[{"call":{"id":"c1","name":"%s"}}]' % name.encode()),
            ("data: the call is missing", compact_exec(name), b'"call"'),
            ("data is missing", compact_exec(name), b""),
            ("id is empty", compact_exec(name, **{"ce-id": None}), body),
            ("specversion", compact_exec(name, **{"ce-specversion": b"0.3"}), body),
            ("toolcallid", compact_exec(name, **{"ce-toolcallid": b"c.1"}), body),
            ("sessionid", compact_exec(name, **{"ce-sessionid": b"s" * 129}), body),
            ("given twice", compact_exec(name) + [(b"Ce-Toolcallid", b"c2")], body),
        ):
            m = await raw_request(router.url, nc, f"toolbus.exec.{name}", headers, data)
            e = ev.decode(m.data, m.headers)
            assert e.type == ev.TYPE_ERROR and e.data["code"] == "bad_event" and why in e.data["message"], (why, e.data)
        assert ran == ["a b"], ran
    finally:
        await nc.close()


def test_valid_time_days_of_month():
    """valid_time refuses what Go's time.Parse(RFC3339Nano) refuses for the day of the month."""
    for s, ok in (("2024-02-29T00:00:00Z", True), ("2000-02-29T00:00:00Z", True), ("2025-02-29T00:00:00Z", False),
                  ("1900-02-29T00:00:00Z", False), ("2026-02-30T00:00:00Z", False), ("2026-04-31T00:00:00Z", False),
                  ("2026-04-30T23:59:59.999Z", True), ("2026-12-31T00:00:00+01:00", True), ("2026-06-31T00:00:00Z", False)):
        assert ev.valid_time(s) is ok, s
