"""Request/reply on the bus: one event out, one event back, errors as exceptions."""

from __future__ import annotations

import asyncio
import random
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
            msg = await nc.request(subject, body, timeout=left, headers=headers)
        except nats.errors.NoRespondersError:
            raise NoRouterError(f"no router serves {subject}") from None
        except nats.errors.TimeoutError:
            raise TimeoutError(f"no reply on {subject} within {timeout:g}s") from None
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
    code = d.get("code") if isinstance(d.get("code"), str) else ev.CODE_INTERNAL
    msg = d.get("message") if isinstance(d.get("message"), str) else ""
    return code, msg
