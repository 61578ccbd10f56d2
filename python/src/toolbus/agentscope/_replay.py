"""The outcome of a parked call, found in the session's stored events.

A parked call's answer may come from anywhere (the inbox, ``toolbus confirm``,
another system) and hours later: its result is the ``io.toolbus.call.result``
(and ``io.toolbus.batch.done``) the router stores in ``P_EVENTS`` (section 3.4).
The adapter reads them through the client's replay (``P.replay.<session>``, a
consumer the router makes and relays pulls to: no JetStream API, so a session's
least-privilege login reads them too), so it never re-sends a batch (which could
run a call again once the dedupe window has passed).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable

from .. import event as ev
from ..errors import ProtocolError, TimeoutError as BusTimeout
from ..records import Result

Key = tuple[str, str]  # (reply id, call id)

# How long the replay may take to deliver its first stored event, and then each next one,
# before what is stored is taken as read.
FIRST, NEXT = 5.0, 1.0


def outcomes_of(e: Any, want: set[Key]) -> dict[Key, Result]:
    """The results of wanted calls an event carries; a result that does not
    decode (a buggy or hostile router's) is none."""
    out: dict[Key, Result] = {}
    try:
        if e.type == ev.TYPE_CALL_RESULT and (e.replyid, e.toolcallid) in want:
            out[(e.replyid, e.toolcallid)] = Result.from_json(e.data)
        elif e.type == ev.TYPE_BATCH_DONE and isinstance(e.data, dict) and isinstance(e.data.get("results"), list):
            for r in e.data["results"]:
                if isinstance(r, dict) and (e.replyid, r.get("id")) in want:
                    out[(e.replyid, r["id"])] = Result.from_json(r)
    except ProtocolError:
        return {}
    return out


class Outcomes:
    """Finds results of parked calls of one session."""

    def __init__(self, client: Any, session: str) -> None:
        self.client = client
        self.session = session

    async def _stored(self, want: set[Key]) -> dict[Key, Result]:
        found: dict[Key, Result] = {}
        async with self.client.replay(self.session) as stored:
            wait = FIRST
            while True:
                try:
                    e = await stored.next(timeout=wait)
                except (BusTimeout, StopAsyncIteration):  # nothing more stored
                    break
                wait = NEXT
                found.update(outcomes_of(e, want))
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
