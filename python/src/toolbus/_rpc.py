"""Request/reply on the bus: one event out, one event back, errors as exceptions."""

from __future__ import annotations

import asyncio
import itertools
import random
import weakref
from dataclasses import dataclass
from typing import Any

import nats.errors

from . import event as ev
from .errors import BusError, NoRouterError, ProtocolError, TimeoutError


@dataclass(frozen=True)
class Resend:
    """Re-sending a batch after silence (docs/protocol.md 3.2.1, 1.25): the same message again when
    ``first`` seconds after a send, or ``after_notice`` seconds after a router's running notice, pass
    with neither the reply nor a notice; at most ``max`` times, each window up to 20 % longer at random."""

    first: float = 6.0
    after_notice: float = 15.0
    max: int = 3

    def __post_init__(self) -> None:
        if not (self.first > 0 and self.after_notice > 0 and self.max >= 0):
            raise ValueError(f"Resend{(self.first, self.after_notice, self.max)}: the windows must be positive, max at least 0")


async def request(nc: Any, subject: str, e: ev.Event, want: str, timeout: float, resend: Resend | None = None) -> Any:
    """Send e as a request, retry ``busy`` with a growing jittered backoff, return the reply's data.

    ``resend``: re-send the same message after silence (batches only; None: never).
    Raises BusError for an ``io.toolbus.error`` reply, NoRouterError when nobody subscribes,
    TimeoutError when no reply came in time, ProtocolError for a reply that is not ``want``.
    """
    body, headers = ev.encode_structured(e)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    backoff = 0.01
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"no reply on {subject} within {timeout:g}s")
        try:
            if resend is None or not resend.max:
                msg = await _watching(nc, nc.request(subject, body, timeout=left, headers=headers))
            else:
                msg = await _watching(nc, _resending(nc, subject, body, headers, left, e.id, resend))
        except nats.errors.NoRespondersError:
            raise NoRouterError(f"no router serves {subject}") from None
        except nats.errors.TimeoutError:
            raise TimeoutError(f"no reply on {subject} within {timeout:g}s") from None
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError, nats.errors.ConnectionReconnectingError,
                nats.errors.OutboundBufferLimitError, nats.errors.StaleConnectionError) as err:
            raise NoRouterError(f"the NATS connection is gone: {type(err).__name__}: {err}") from None
        except nats.errors.MaxPayloadError as err:
            raise BusError(f"the message is larger than the server's max_payload: {err}", ev.CODE_BAD_REQUEST) from None
        re = ev.decode(msg.data, msg.headers)
        if re.type == ev.TYPE_ERROR:
            code, message = error_of(re)
            if code == ev.CODE_BUSY and loop.time() + backoff < deadline:
                await asyncio.sleep(backoff / 2 + random.random() * backoff)
                backoff = min(2 * backoff, 1.0)
                continue
            raise BusError(message, code)
        if re.type != want:
            raise ProtocolError(f"expected {want} on {subject}, got {re.type}")
        return re.data


async def synced(nc: Any) -> None:
    """Returns once the server has read what nc sent before (a subscription, a publish). nats-py's own
    ``flush()`` is no such barrier: it writes its PING straight to the socket, ahead of the commands still
    waiting for its flusher (nats-py 2.16), so its PONG may come back before a SUB just made has left;
    the pending commands are written first here, then the PING."""
    pending = getattr(nc, "_flush_pending", None)
    if pending is not None and nc.is_connected:
        await pending(force_flush=True)
    await nc.flush()


def error_of(e: ev.Event) -> tuple[str, str]:
    d = e.data if isinstance(e.data, dict) else {}
    code, msg = d.get("code"), d.get("message")
    return (code if isinstance(code, str) else ev.CODE_INTERNAL), (msg if isinstance(msg, str) else "")



class _Watch:
    """Cancels the requests in flight on a connection once it closes (nats-py would wait out their timeouts)."""

    def __init__(self, nc: Any) -> None:
        self.nc = weakref.ref(nc)  # not the connection itself: it is the key of _watches
        self.waiting: set[asyncio.Task[Any]] = set()
        self.closed: set[asyncio.Task[Any]] = set()
        self.poller: asyncio.Task[Any] | None = None

    async def poll(self) -> None:
        while self.waiting:
            await asyncio.sleep(0.25)
            nc = self.nc()
            if nc is None or nc.is_closed:
                for t in self.waiting:
                    self.closed.add(t)
                    t.cancel()
                return
        self.poller = None


_watches: "weakref.WeakKeyDictionary[Any, _Watch]" = weakref.WeakKeyDictionary()


async def _watching(nc: Any, waiting: Any) -> Any:
    """Await waiting (a request), ended as soon as the connection closes."""
    w = _watches.get(nc)
    if w is None:
        w = _watches[nc] = _Watch(nc)
    me = asyncio.current_task()
    assert me is not None
    w.waiting.add(me)
    if w.poller is None or w.poller.done():
        w.poller = asyncio.ensure_future(w.poll())
    try:
        return await waiting
    except asyncio.CancelledError:
        if me in w.closed:
            w.closed.discard(me)
            me.uncancel() if hasattr(me, "uncancel") else None
            raise nats.errors.ConnectionClosedError() from None
        raise
    finally:
        w.waiting.discard(me)


class _Wait:
    """One batch's wait: its reply, and whether a notice that counts came since the window began."""

    def __init__(self, reply_id: str) -> None:
        self.reply_id = reply_id
        self.reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.notice: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class _Mux:
    """One wildcard subscription per connection, ``<inbox>.>``: a batch's reply comes on ``<inbox>.<n>``,
    its notices on ``<inbox>.<n>.running``. Each message only completes a future: a flood costs no memory.
    It keeps no reference to the connection (the key of ``_muxes``, which would then never be freed)."""

    def __init__(self, nc: Any) -> None:
        self.prefix = nc.new_inbox() + "."
        self.waits: dict[str, _Wait] = {}
        self.n = itertools.count(1)
        self.opened: asyncio.Future[None] | None = None

    async def open(self, nc: Any) -> None:
        async def subscribe() -> None:
            await nc.subscribe(self.prefix + ">", cb=self.on)

        if self.opened is None:
            self.opened = asyncio.ensure_future(subscribe())
        try:
            await asyncio.shield(self.opened)
        except Exception:
            self.opened = None
            raise

    async def on(self, m: Any) -> None:
        token, _, kind = m.subject[len(self.prefix):].partition(".")
        w = self.waits.get(token)
        if w is None:
            return
        if not kind and not w.reply.done():
            w.reply.set_result(m)
        elif kind == "running" and not w.notice.done() and _counts(m, w.reply_id):
            w.notice.set_result(None)


def _counts(m: Any, reply_id: str) -> bool:
    """A notice counts when it is a call.running event of the batch (3.2.1); anything else is ignored."""
    try:
        n = ev.decode(m.data, m.headers)
    except ProtocolError:
        return False
    return n.type == ev.TYPE_CALL_RUNNING and n.replyid == reply_id


_muxes: "weakref.WeakKeyDictionary[Any, _Mux]" = weakref.WeakKeyDictionary()


async def _resending(nc: Any, subject: str, body: bytes, headers: dict[str, str], timeout: float, reply_id: str, r: Resend) -> Any:
    """Publish a batch, re-publish the same bytes after each silent window (at most r.max times), return the reply."""
    m = _muxes.get(nc)
    if m is None:
        m = _muxes[nc] = _Mux(nc)
    await m.open(nc)
    loop = asyncio.get_running_loop()
    token, now = str(next(m.n)), loop.time()
    end, at, sent = now + timeout, now, -1  # sent: the re-sends so far, -1 before the first send
    w = m.waits[token] = _Wait(reply_id)
    try:
        while True:
            now = loop.time()
            if now >= end:
                raise nats.errors.TimeoutError
            if sent < r.max and now >= at:
                await nc.publish(subject, body, reply=m.prefix + token, headers=headers)
                sent, at = sent + 1, loop.time() + r.first * random.uniform(1, 1.2)
                continue
            await asyncio.wait((w.reply, w.notice), timeout=(min(at, end) if sent < r.max else end) - now,
                               return_when=asyncio.FIRST_COMPLETED)
            if w.reply.done():
                msg = w.reply.result()
                if msg.headers and msg.headers.get("Status") == "503":
                    raise nats.errors.NoRespondersError
                return msg
            if w.notice.done():
                w.notice = loop.create_future()
                at = loop.time() + r.after_notice * random.uniform(1, 1.2)
    finally:
        del m.waits[token]
