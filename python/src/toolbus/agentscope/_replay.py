"""The outcome of a parked call, found in the session's stored events.

A parked call's answer may come from anywhere (the inbox, ``toolbus confirm``,
another system) and hours later: its result is the ``io.toolbus.call.result``
(and ``io.toolbus.batch.done``) the router stores in ``P_EVENTS`` (section 3.4).
The adapter asks a router for a replay consumer (``P.replay.<session>``) and
reads it, so it never re-sends a batch (which could run a call again once the
dedupe window has passed).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable

from .. import _rpc
from .. import event as ev
from ..records import Result

Key = tuple[str, str]  # (reply id, call id)


def outcomes_of(e: Any, want: set[Key]) -> dict[Key, Result]:
    """The results of wanted calls an event carries."""
    out: dict[Key, Result] = {}
    if e.type == ev.TYPE_CALL_RESULT and (e.replyid, e.toolcallid) in want:
        out[(e.replyid, e.toolcallid)] = Result.from_json(e.data)
    elif e.type == ev.TYPE_BATCH_DONE:
        for r in (e.data or {}).get("results", []):
            if (e.replyid, r.get("id")) in want:
                out[(e.replyid, r["id"])] = Result.from_json(r)
    return out


class Outcomes:
    """Finds results of parked calls of one session."""

    def __init__(self, client: Any, session: str) -> None:
        self.client = client
        self.session = session

    async def _stored(self, want: set[Key]) -> dict[Key, Result]:
        c = self.client
        ready = await _rpc.request(
            c.nc, c.subjects.replay(self.session),
            ev.Event(ev.TYPE_REPLAY, c.source, {}, sessionid=self.session),
            ev.TYPE_REPLAY_READY, 10.0,
        )
        js = c.nc.jetstream()
        sub = await js.pull_subscribe_bind(durable=ready["consumer"], stream=ready["stream"])
        found: dict[Key, Result] = {}
        try:
            while True:
                try:
                    msgs = await sub.fetch(256, timeout=1.0)
                except Exception:  # nats TimeoutError: nothing more stored
                    break
                for m in msgs:
                    try:
                        e = ev.decode(m.data, dict(m.headers or {}))
                    except Exception:
                        continue
                    found.update(outcomes_of(e, want))
        finally:
            try:
                await sub.unsubscribe()
                await js.delete_consumer(ready["stream"], ready["consumer"])
            except Exception:
                pass
        return found

    async def find(self, keys: Iterable[Key], wait: float = 0.0) -> dict[Key, Result]:
        """The results the bus has for keys; waits up to ``wait`` seconds for
        at least one when none is there yet."""
        want = set(keys)
        if not want:
            return {}
        async with self.client.events(self.session) as live:
            found = await self._stored(want)
            deadline = time.monotonic() + wait
            while not found and time.monotonic() < deadline:
                try:
                    e = await live.next(timeout=max(0.01, deadline - time.monotonic()))
                except (asyncio.TimeoutError, Exception):
                    break
                found.update(outcomes_of(e, want))
        return found

    async def wait(self, reply_id: str, call_id: str, timeout: float) -> Result:
        """The result of one call, waiting for it up to timeout seconds."""
        got = await self.find([(reply_id, call_id)], wait=timeout)
        res = got.get((reply_id, call_id))
        if res is None:
            raise TimeoutError(f"no result for call {call_id} of batch {reply_id} within {timeout}s")
        return res
