"""Request/reply on the bus: one event out, one event back, errors as exceptions."""

from __future__ import annotations

import asyncio
import random
import weakref
from typing import Any

import nats.errors

from . import event as ev
from .errors import BusError, NoRouterError, ProtocolError, TimeoutError


async def request(nc: Any, subject: str, e: ev.Event, want: str, timeout: float) -> Any:
    """Send e as a request, retry ``busy`` with a growing jittered backoff, return the reply's data.

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
            msg = await _request_watching(nc, subject, body, left, headers)
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


def error_of(e: ev.Event) -> tuple[str, str]:
    d = e.data if isinstance(e.data, dict) else {}
    code, msg = d.get("code"), d.get("message")
    return (code if isinstance(code, str) else ev.CODE_INTERNAL), (msg if isinstance(msg, str) else "")



class _Watch:
    """Cancels the requests in flight on a connection once it closes (nats-py would wait out their timeouts)."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.waiting: set[asyncio.Task[Any]] = set()
        self.closed: set[asyncio.Task[Any]] = set()
        self.poller: asyncio.Task[Any] | None = None

    async def poll(self) -> None:
        while self.waiting:
            await asyncio.sleep(0.25)
            if self.nc.is_closed:
                for t in self.waiting:
                    self.closed.add(t)
                    t.cancel()
                return
        self.poller = None


_watches: "weakref.WeakKeyDictionary[Any, _Watch]" = weakref.WeakKeyDictionary()


async def _request_watching(nc: Any, subject: str, body: bytes, timeout: float, headers: dict[str, str]) -> Any:
    """nc.request that ends as soon as the connection closes."""
    w = _watches.get(nc)
    if w is None:
        w = _watches[nc] = _Watch(nc)
    me = asyncio.current_task()
    assert me is not None
    w.waiting.add(me)
    if w.poller is None or w.poller.done():
        w.poller = asyncio.ensure_future(w.poll())
    try:
        return await nc.request(subject, body, timeout=timeout, headers=headers)
    except asyncio.CancelledError:
        if me in w.closed:
            w.closed.discard(me)
            me.uncancel() if hasattr(me, "uncancel") else None
            raise nats.errors.ConnectionClosedError() from None
        raise
    finally:
        w.waiting.discard(me)
