"""Router-made consumers, read through the router (docs/protocol.md 3.4, 6.2): replay and the handoff.

A follower asks a router for a pull consumer on one subject (``P.replay.<session>`` or
``P.handoff.<kind>[.<tool>]``), pulls from it with ``io.toolbus.consumer.next`` on the same
subject (for replay the router relays each pull to JetStream with the follower's reply inbox, so
the stored messages and JetStream's closing status come from the server itself; for the handoff it
reads the pull itself and sends the requests of the parked records the subject grants, each with
header ``Nats-Sequence``, then a ``Status`` header as JetStream's), asks for another one from
the next sequence when it is lost, and stops it with ``io.toolbus.consumer.stop`` at the end. It
uses no JetStream API, so it works with the least-privilege credentials of docs/security.md.
This is the Go client's follower (client/follow.go), written again.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, AsyncIterator

import nats.errors

from . import _rpc
from . import event as ev
from .errors import ProtocolError
from .errors import TimeoutError as TBTimeout

if TYPE_CHECKING:
    from .client import Client

# Bounds of a relayed pull: how many messages one pull asks for, how long it waits on the server
# for new ones, and how much longer the follower waits for the server's closing status before it
# takes the consumer for lost when its router sends no heartbeats (a router of 1.8; 3.4: "no closing
# status within the wait plus 10 s"). The same as Go's.
BATCH = 256
WAIT = 5.0
GRACE = 10.0
# Heartbeats (3.4, protocol 1.9): of a router whose ready says "heartbeat": true a pull asks for one
# every BEAT seconds while it waits. A pull that brings nothing at all (no message, heartbeat or
# status) within QUIET seconds was lost on its way and is sent again on the same consumer; after
# SILENCES such pulls in a row the consumer is asked for again. The same as Go's.
BEAT = 1.0
QUIET = 2 * BEAT
SILENCES = 3
# How long the follower waits before asking a router again when asking failed.
REOPEN_PAUSE = 1.0
# Events held for the reader before the follower stops pulling (as Go's channel of 1024).
HIGH_WATER = 1024

_DIGITS = re.compile(r"[0-9]{1,20}")

# What one pull leaves the follower to do: pull again, ask for a new consumer, or stop this one
# (it went silent) and ask for a new one.
_KEPT, _LOST, _SILENT = "kept", "lost", "silent"


def stream_seq(reply: str | None) -> int | None:
    """The stream sequence of a JetStream message's reply subject, or None.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``, or with
    a domain and account hash before the stream (``$JS.ACK.<domain>.<account hash>.<stream>...``).
    """
    t = (reply or "").split(".")
    if len(t) < 9 or t[0] != "$JS" or t[1] != "ACK":
        return None
    tok = t[7 if len(t) > 9 else 5]
    if not _DIGITS.fullmatch(tok):
        return None
    n = int(tok)
    return n if n < 1 << 64 else None


def message_seq(m: Any) -> int | None:
    """The stream sequence of a message a pull delivered, or None.

    From its reply subject when JetStream sent it; from its ``Nats-Sequence`` header when a router
    relayed a handoff request on the pull's inbox (6.2, protocol 1.6).
    """
    seq = stream_seq(m.reply)
    if seq is not None:
        return seq
    tok = (m.headers or {}).get("Nats-Sequence", "")
    if not _DIGITS.fullmatch(tok):
        return None
    n = int(tok)
    return n if 0 < n < 1 << 64 else None


class FollowStream:
    """Events read from a router-made consumer: stored ones first, then new ones as they are stored.

    Open it with ``async with``; read with ``async for e in stream``, :meth:`next` or :meth:`until`.
    A lost consumer (a node's restart, its idle time, a refusal) is asked for again from the
    sequence after the last one received, so nothing is missed or repeated.
    """

    def __init__(self, client: Client, subject: str, session: str, create: str, ready: str, start_seq: int) -> None:
        if isinstance(start_seq, bool) or not isinstance(start_seq, int) or not 0 <= start_seq < 1 << 64:
            raise ProtocolError(f"start_seq must be a stream sequence (an int, 0 for all), not {start_seq!r}", ev.CODE_BAD_REQUEST)
        self._c, self._subject, self._session = client, subject, session
        self._create, self._ready = create, ready
        self._next = start_seq  # the stream sequence wanted next
        self._consumer = ""
        self._beats = False  # the consumer's router honours heartbeat_ms (its ready said so)
        # Every pull has its own reply subject <inbox>.<n> under one subscription on <inbox>.*, for
        # one consumer's life: a pull sent again after a silence may leave the earlier one alive (a
        # slow router), and what it delivers still arrives (the consumer acks none: each message
        # comes once, to one pull), while its closing status, told apart by its subject, does not
        # end the pull sent after it.
        self._inbox = ""
        self._sub: Any = None
        self._pulls = 0  # pulls sent: the last reply subject's <n>
        self._silent = 0  # pulls in a row that brought nothing
        self._last = 0
        self._q: asyncio.Queue[tuple[int, ev.Event] | None] = asyncio.Queue()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def subject(self) -> str:
        """Where the follower asks (``P.replay.<session>`` or ``P.handoff.<kind>[.<tool>]``)."""
        return self._subject

    @property
    def consumer(self) -> str:
        """The name of the router-made consumer read now ("" while none)."""
        return self._consumer

    @property
    def last_seq(self) -> int:
        """The stream sequence of the last event :meth:`next` returned (0: none yet); resume after it with start_seq."""
        return self._last

    async def __aenter__(self) -> FollowStream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Ask a router for the consumer (raising its refusal) and start following it."""
        if self._task is not None or self._closed:
            raise ProtocolError("a follow stream starts once", ev.CODE_BAD_REQUEST)
        try:
            await self._open()
        except BaseException:
            await self._unsubscribe()
            raise
        self._task = asyncio.ensure_future(self._run())

    async def aclose(self) -> None:
        """Stop following and ask the router to delete the consumer (the server drops an idle one anyway)."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._stop()
        self._q.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self

    async def __anext__(self) -> ev.Event:
        return await self.next(timeout=None)

    async def next(self, timeout: float | None = 30.0) -> ev.Event:
        """The next event; toolbus.TimeoutError after timeout seconds (None: wait), StopAsyncIteration once closed."""
        if self._task is None and not self._closed:
            raise ProtocolError("open the stream first: async with ...", ev.CODE_BAD_REQUEST)
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            raise TBTimeout(f"no event on {self._subject} within {timeout:g}s") from None
        if item is None:
            self._q.put_nowait(None)  # for every other reader too
            raise StopAsyncIteration
        self._room.set()
        self._last = item[0]
        return item[1]

    async def until(self, type: str, *, reply_id: str | None = None, call_id: str | None = None,
                    timeout: float = 30.0) -> ev.Event:
        """The next event of the type (and reply, call); others are skipped."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            e = await self.next(max(end - loop.time(), 0.001))
            if e.type == type and (reply_id is None or e.replyid == reply_id) and (call_id is None or e.toolcallid == call_id):
                return e

    async def _open(self) -> None:
        """Ask a router for a consumer from the sequence wanted next."""
        if self._sub is None:
            self._inbox = self._c.nc.new_inbox()
            self._sub = await self._c.nc.subscribe(self._inbox + ".*")
        e = ev.Event(self._create, self._c.source, {"start_seq": self._next} if self._next else {}, sessionid=self._session)
        ready = await _rpc.request(self._c.nc, self._subject, e, self._ready, 10)
        if not (isinstance(ready, dict) and isinstance(ready.get("stream"), str) and isinstance(ready.get("consumer"), str)
                and ready["consumer"]):
            raise ProtocolError(f"{self._ready}: stream and consumer must be strings")
        self._consumer = ready["consumer"]
        self._beats = ready.get("heartbeat") is True
        self._silent = 0

    async def _drop(self) -> None:
        """Forget the consumer and its inbox: what its pulls still deliver goes nowhere."""
        self._consumer = ""
        await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass

    async def _run(self) -> None:
        """Follow until closed: pull, and ask again when the consumer is lost."""
        try:
            while not self._c.nc.is_closed:
                if not self._consumer:
                    try:
                        await self._open()
                    except Exception:  # noqa: BLE001 - no router now, a limit, the connection: try again
                        await asyncio.sleep(REOPEN_PAUSE)
                        continue
                while self._q.qsize() >= HIGH_WATER:  # the reader is behind: hold the next pull
                    self._room.clear()
                    await self._room.wait()
                try:
                    kept = await self._pull(min(BATCH, HIGH_WATER - self._q.qsize()))
                except (nats.errors.Error, OSError):
                    kept = _LOST
                if kept == _SILENT:
                    await self._stop()  # it may live on, answering no one: the server drops it once idle anyway
                elif kept == _LOST:
                    await self._drop()  # ask again from self._next
        finally:
            await self._unsubscribe()  # the consumer is kept for aclose to stop
            self._q.put_nowait(None)

    async def _pull(self, batch: int) -> str:
        """Relay one pull and queue what comes until its closing status, a full batch or its silence.

        Returns _KEPT to pull again; _LOST when the consumer is lost: a 409 (or any status but 404,
        408 and a heartbeat), a refusal from the router, or (without heartbeats) no closing status
        within WAIT + GRACE seconds; _SILENT after SILENCES pulls in a row brought nothing within QUIET.
        """
        nc = self._c.nc
        self._pulls += 1
        reply = f"{self._inbox}.{self._pulls}"
        data: dict[str, Any] = {"consumer": self._consumer, "batch": batch, "expires_ms": int(WAIT * 1000)}
        quiet = WAIT + GRACE
        if self._beats:
            data["heartbeat_ms"], quiet = int(BEAT * 1000), QUIET
        body, headers = ev.encode_structured(ev.Event(ev.TYPE_CONSUMER_NEXT, self._c.source, data, sessionid=self._session))
        await nc.publish(self._subject, body, reply=reply, headers=headers)
        mine = self._inbox + "."
        got = 0
        while got < batch:
            try:
                m = await self._sub.next_msg(timeout=quiet)
            except nats.errors.TimeoutError:
                if not self._beats:
                    return _LOST
                self._silent += 1
                return _SILENT if self._silent >= SILENCES else _KEPT  # lost on its way: pull again
            self._silent = 0  # the consumer answers
            status = (m.headers or {}).get("Status", "")
            if status == "100":  # a heartbeat
                continue
            e: ev.Event | None = None
            if not status:
                try:
                    e = ev.decode(m.data, m.headers)
                except ProtocolError:
                    pass
            if status or (m.subject.startswith(mine) and (e is None or e.type == ev.TYPE_ERROR)):
                if m.subject != reply:  # an earlier pull's end or refusal: this one goes on
                    continue
                if status in ("404", "408"):  # none now, or the wait ended: pull again
                    return _KEPT
                return _LOST  # 409 consumer deleted, 503 no responders, the router's refusal
            got += 1
            seq = message_seq(m)
            if seq is not None:  # the highest yet: two routers relaying two handoff pulls may deliver out of order
                self._next = max(self._next, seq + 1)
            if e is not None:  # not an event: skipped, as the Go client does
                self._q.put_nowait((seq or 0, e))
        return _KEPT

    async def _stop(self) -> None:
        """Ask the router to delete the consumer (publish, no reply)."""
        name = self._consumer
        await self._drop()
        if not name or self._c.nc.is_closed:
            return
        try:
            e = ev.Event(ev.TYPE_CONSUMER_STOP, self._c.source, {"consumer": name}, sessionid=self._session)
            body, headers = ev.encode_structured(e)
            await self._c.nc.publish(self._subject, body, headers=headers)
            await self._c.nc.flush(timeout=5)
        except Exception:  # noqa: BLE001 - best effort: the server deletes it after 30 s idle anyway
            pass


class ReplayStream(FollowStream):
    """A session's stored events from the events stream through a router (3.4), then newly stored ones."""

    def __init__(self, client: Client, session: str, start_seq: int = 0) -> None:
        super().__init__(client, client.subjects.replay(session), session, ev.TYPE_REPLAY, ev.TYPE_REPLAY_READY, start_seq)

    async def __aenter__(self) -> ReplayStream:
        await self.start()
        return self


class HandoffStream(FollowStream):
    """Handoff requests (6.2): the calls still parked, oldest first, then new ones, through a router."""

    def __init__(self, client: Client, kind: str, tool: str = "", start_seq: int = 0) -> None:
        super().__init__(client, client.subjects.handoff(kind, tool), "", ev.TYPE_HANDOFF_FOLLOW, ev.TYPE_HANDOFF_READY, start_seq)

    async def __aenter__(self) -> HandoffStream:
        await self.start()
        return self


__all__ = ["FollowStream", "HandoffStream", "ReplayStream", "stream_seq"]
