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
    code = d.get("code") if isinstance(d.get("code"), str) else ev.CODE_INTERNAL
    msg = d.get("message") if isinstance(d.get("message"), str) else ""
    return code, msg


async def _request_watching(nc: Any, subject: str, body: bytes, timeout: float, headers: dict[str, str]) -> Any:
    """nc.request that ends as soon as the connection closes (nats-py would wait for the timeout)."""
    task = asyncio.ensure_future(nc.request(subject, body, timeout=timeout, headers=headers))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if done:
                return task.result()
            if nc.is_closed:
                task.cancel()
                raise nats.errors.ConnectionClosedError()
    except asyncio.CancelledError:
        task.cancel()
        raise
