"""The agent side (docs/protocol.md 3, 4, 5.9, 6.3): call batches, follow events, answer parked calls."""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import hashlib
import os
from typing import Any, AsyncIterator, Sequence

import nats

from . import _rpc
from ._rpc import Resend
from . import event as ev
from .event import _q
from .errors import NoToolCallsError, ProtocolError, ToolbusError
from .follow import HandoffStream, ReplayStream
from .model import ModelReply, load_groups, parse_turn, reset_input
from .offload import DEFAULT_INLINE_LIMIT, DEFAULT_MAX_OUTPUT, Offloader, parse_ref
from .records import Answer, Block, Call, Reply, Request, Rule, ToolsList, to_blocks

CallLike = Call | dict[str, Any]
EVENTS_WAITING = 1024


def _calls(calls: Sequence[CallLike] | CallLike) -> list[dict[str, Any]]:
    if isinstance(calls, (Call, dict)):
        calls = [calls]
    out = []
    for i, c in enumerate(calls):
        if isinstance(c, dict):
            c = Call.from_json(c, f"calls[{i}]")
        if not isinstance(c, Call):
            raise TypeError(f"calls[{i}] must be a Call or a dict, not {type(c).__name__}")
        out.append(c.to_json())
    return out


def _request(req: Request | dict[str, Any] | None) -> dict[str, Any] | None:
    if req is None:
        return None
    if isinstance(req, dict):
        req = Request.from_json(req)
    return req.to_json()


class EventStream:
    """Live events of one session (``P.events.<session>``), opened with ``async with``.

    At most ``EVENTS_WAITING`` (1024) events wait for the reader, as the Go client's Watch holds;
    the ones that come while it is full are dropped and counted in ``dropped``.
    """

    def __init__(self, nc: Any, subject: str) -> None:
        self._nc, self._subject = nc, subject
        self._sub: Any = None
        self._q: asyncio.Queue[ev.Event] = asyncio.Queue(EVENTS_WAITING)
        self.dropped = 0

    async def __aenter__(self) -> EventStream:
        async def on(m: Any) -> None:
            try:
                self._q.put_nowait(ev.decode(m.data, m.headers))
            except ProtocolError:
                pass  # not an event: skipped, as the Go client's Watch does
            except asyncio.QueueFull:
                self.dropped += 1  # a reader behind a flood: the memory held stays bounded

        self._sub = await self._nc.subscribe(self._subject, cb=on)
        await _rpc.synced(self._nc)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass

    def __aiter__(self) -> AsyncIterator[ev.Event]:
        return self

    async def __anext__(self) -> ev.Event:
        if self._sub is None and self._q.empty():
            raise StopAsyncIteration
        return await self._q.get()

    async def next(self, timeout: float = 30.0) -> ev.Event:
        """The next event; raises toolbus.TimeoutError after timeout seconds."""
        try:
            return await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            from .errors import TimeoutError as TBTimeout

            raise TBTimeout(f"no event on {self._subject} within {timeout:g}s") from None

    async def until(self, type: str, *, reply_id: str | None = None, call_id: str | None = None, timeout: float = 30.0) -> ev.Event:
        """The next event of the type (and reply, call); others are skipped."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            e = await self.next(max(end - loop.time(), 0.001))
            if e.type == type and (reply_id is None or e.replyid == reply_id) and (call_id is None or e.toolcallid == call_id):
                return e


class Client:
    """An agent's handle on the bus. Safe to share between tasks of one event loop."""

    def __init__(self, nc: Any, *, prefix: str = "toolbus", source: str = "toolbus/client", timeout: float | None = None,
                 inline_limit: int = DEFAULT_INLINE_LIMIT, max_output: int = DEFAULT_MAX_OUTPUT, resend: Resend | None = Resend()) -> None:
        self.nc = nc
        self.resend = resend
        self.subjects = ev.Subjects(prefix)
        self.source = source or "toolbus/client"
        self.timeout = timeout
        self._owned = False
        self._revs: dict[str, int] = {}
        self._off = Offloader(nc, self.subjects.bucket("outputs"), inline_limit, max_output)

    @classmethod
    async def connect(cls, url: str | None = None, *, prefix: str = "toolbus", source: str = "toolbus/client",
                      timeout: float | None = None, inline_limit: int = DEFAULT_INLINE_LIMIT,
                      max_output: int = DEFAULT_MAX_OUTPUT, resend: Resend | None = Resend(), **nats_options: Any) -> Client:
        """Connect to NATS (url, else $NATS_URL, else nats://127.0.0.1:4222); the client owns the connection."""
        nats_options.setdefault("name", source)
        nc = await nats.connect(url or os.environ.get("NATS_URL") or "nats://127.0.0.1:4222", **nats_options)
        c = cls(nc, prefix=prefix, source=source, timeout=timeout, inline_limit=inline_limit, max_output=max_output, resend=resend)
        c._owned = True
        return c

    async def close(self) -> None:
        """Close the connection when the client dialed it."""
        if self._owned and not self.nc.is_closed:
            await self.nc.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()




    async def call(self, session: str, calls: Sequence[CallLike] | CallLike, *, user: Any = None, context: Any = None,
                   request: Request | dict[str, Any] | None = None, events: str | None = None, reply_id: str | None = None,
                   expiry: _dt.datetime | float | None = None, traceparent: str | None = None, timeout: float | None = None) -> Reply:
        """Run a batch (3.1) and wait for its reply (3.2), re-sent after silence as the client's ``resend`` says (3.2.1).

        ``expiry``: a datetime or unix time."""
        e = _batch(self, session, calls, user, context, request, events, reply_id, expiry, traceparent)
        data = await _rpc.request(self.nc, self.subjects.call(session), e, ev.TYPE_CALL_REPLY, _timeout(self, timeout, 600), self.resend)
        reply = Reply.from_json(data)
        # 3.2: each call of the batch once, finished or parked; a forged reply (anyone answering
        # first on P.call.<session>) may name others, or one twice
        if sorted(c["id"] for c in e.data["calls"]) != sorted([r.id for r in reply.results] + [p.id for p in reply.parked]):
            raise ProtocolError("reply: its results and parked calls do not name each call of the batch once")
        if reply.session_rev:
            self._revs[session] = reply.session_rev
        return reply

    async def publish(self, session: str, calls: Sequence[CallLike] | CallLike, *, user: Any = None, context: Any = None,
                      request: Request | dict[str, Any] | None = None, events: str | None = None, reply_id: str | None = None,
                      expiry: _dt.datetime | float | None = None, traceparent: str | None = None) -> str:
        """Publish a batch without waiting; follow it with :meth:`events`. Returns its reply id."""
        e = _batch(self, session, calls, user, context, request, events, reply_id, expiry, traceparent)
        body, headers = ev.encode_structured(e)
        await self.nc.publish(self.subjects.call(session), body, headers=headers)
        await self.nc.flush()
        return e.id

    def events(self, session: str) -> EventStream:
        """Live events of a session; use ``async with c.events(s) as stream`` before sending the batch."""
        if session != "*" and not ev.valid_id(session):
            raise ProtocolError(f"session id {_q(session)} is not valid")
        return EventStream(self.nc, self.subjects.events(session))

    def replay(self, session: str, start_seq: int = 0) -> ReplayStream:
        """A session's stored events (3.4), from ``start_seq`` (0: the first kept), then newly stored ones.

        Read through a consumer a router makes and relays pulls from (``P.replay.<session>``), asked
        for again from the next sequence when it is lost: ``async with c.replay(s) as stored``. No
        JetStream permission is needed.
        """
        if not ev.valid_id(session):
            raise ProtocolError(f"session id {_q(session)} is not valid")
        return ReplayStream(self, session, start_seq)

    def follow_handoff(self, tool: str = "", kind: str = "external", start_seq: int = 0) -> HandoffStream:
        """Handoff requests (6.2): the calls still parked, oldest first, then new ones (Go's `Client.Parked().Follow`).

        ``kind`` external or confirm; ``tool`` "" for every tool. Requests published while the handler
        was offline are seen while they are open (answered, expired or cancelled ones are gone). Read
        through a consumer a router makes on ``P.handoff.<kind>[.<tool>]``: no JetStream permission is
        needed. Resume after a stream's ``last_seq`` with ``start_seq=last_seq + 1`` (a sequence of ``P_parked``'s
        stream since protocol 1.6).
        """
        if kind not in ("external", "confirm") or (tool and not ev.valid_name(tool)):
            raise ProtocolError(f"follow_handoff({_q(tool)}, {_q(kind)}): a valid tool name (or \"\") and kind external or confirm are needed", "bad_request")
        return HandoffStream(self, kind, tool, start_seq)

    def requests(self, tool: str, kind: str = "external") -> EventStream:
        """Live handoff requests of a tool (6.2): ``kind`` external (``P.external.<tool>``) or confirm.

        Each event's data decodes with :meth:`ExternalRequest.from_event`; answer with :meth:`answer`
        or :meth:`confirm`. Requests published before the stream opened are not seen: use
        :meth:`follow_handoff` for those.
        """
        if not ev.valid_name(tool) or kind not in ("external", "confirm"):
            raise ProtocolError(f"requests({_q(tool)}, {_q(kind)}): a valid tool name and kind external or confirm are needed", "bad_request")
        subj = self.subjects.external(tool) if kind == "external" else self.subjects.confirm(tool)
        return EventStream(self.nc, subj)

    async def tools(self, session: str, format: str = "toolbus", *, request: Request | dict[str, Any] | None = None,
                    user: Any = None, deferred: bool = False, timeout: float | None = None) -> ToolsList:
        """What the model sees (4.1), in one of toolbus.event.FORMATS.

        ``deferred=True`` (formats openai-responses and anthropic) adds the tools of the inactive meta
        groups for the provider's own tool search, and :attr:`ToolsList.deferred` names their groups.
        """
        data: dict[str, Any] = {}
        if format:
            data["format"] = format
        if deferred:
            data["deferred"] = True
        req = _request(request)
        if req is not None:
            data["request"] = req
        if user is not None:
            data["user"] = user
        e = _event(self, ev.TYPE_TOOLS_QUERY, session, data)
        out = await _rpc.request(self.nc, self.subjects.tools(session), e, ev.TYPE_TOOLS_LIST, _timeout(self, timeout, 10))
        tl = ToolsList.from_json(out)
        if tl.session_rev:
            self._revs[session] = tl.session_rev
        return tl

    async def cancel(self, session: str, reply_id: str, calls: Sequence[str] | None = None) -> None:
        """Cancel every call of a reply, or the calls named (3.5).

        Naming more than ``MAX_CANCEL_CALLS`` (1,024) ids raises :class:`ProtocolError` and sends
        nothing: routers and workers drop such a cancel whole.
        """
        if calls and len(calls) > ev.MAX_CANCEL_CALLS:
            raise ProtocolError(f"a cancel names {len(calls)} calls; at most {ev.MAX_CANCEL_CALLS} are allowed")
        e = _event(self, ev.TYPE_CALL_CANCEL, session, {"calls": list(calls)} if calls else None)
        e.replyid = reply_id
        e.validate()
        body, headers = ev.encode_structured(e)
        await self.nc.publish(self.subjects.cancel(session), body, headers=headers)
        await self.nc.flush()


    async def answer(self, tool: str, session: str, reply_id: str, call_id: str, output: Any, *, state: str = "success",
                     timeout: float | None = None) -> None:
        """Answer an external (or request-scoped) call on ``P.answer.<tool>`` (6.3); large outputs are stored first."""
        for v, n in ((session, "session"), (reply_id, "reply"), (call_id, "call")):
            if not ev.valid_id(v):
                raise ProtocolError(f"an answer needs valid session, reply and call ids ({n} id {_q(v)})")
        blocks = to_blocks(output)
        blocks = await self._off.fit(f"{session}.{reply_id}.{call_id}", blocks, 0, state == "error")
        await _answer(self, self.subjects.answer(tool), session, reply_id, call_id, Answer(state=state, output=blocks), "answer", timeout)

    async def answer_parked(self, parked: Any, session: str, reply_id: str, output: Any, *, state: str = "success") -> None:
        """:meth:`answer` for a reply's :class:`Parked` entry."""
        await self.answer(parked.name, session, reply_id, parked.id, output, state=state)

    async def confirm(self, tool: str, session: str, reply_id: str, call_id: str, confirmed: bool, *, input_digest: str | None = None,
                      input: Any = None, rules: Sequence[Rule | dict[str, Any]] | None = None, reason: str | None = None,
                      timeout: float | None = None) -> None:
        """Confirm or deny a parked call on ``P.approve.<tool>`` (6.3)."""
        rs = [r if isinstance(r, Rule) else Rule.from_json(r, f"rules[{i}]", strict=True) for i, r in enumerate(rules or [])]
        a = Answer(confirmed=bool(confirmed), input_digest=input_digest or "", input=input, rules=rs, reason=reason or "")
        await _answer(self, self.subjects.approve(tool), session, reply_id, call_id, a, "confirmation", timeout)

    async def admin(self, verb: str, session: str = "", data: Any = None, timeout: float | None = None) -> Any:
        """An administration verb (9); returns the reply data."""
        self._revs.pop(session, None)
        e = _event(self, ev.TYPE_ADMIN, session, {} if data is None else data)
        return await _rpc.request(self.nc, self.subjects.admin(verb), e, ev.TYPE_ADMIN_REPLY, _timeout(self, timeout, 10))

    async def task_query(self, session: str, op: str, ids: Sequence[str] = (), *, timeout_ms: int = 0, any: bool = False,
                         timeout: float | None = None) -> dict[str, Any]:
        """One task verb on ``P.tasks.<session>`` (5.10): ``{"tasks": [...], "output"?: [...]}``; a refusal raises."""
        data: dict[str, Any] = {"op": op}
        if ids:
            data["ids"] = list(ids)
        if timeout_ms:
            data["timeout_ms"] = int(timeout_ms)
        if any:
            data["any"] = True
        e = _event(self, ev.TYPE_TASK_QUERY, session, data)
        wait = 10 + min(max(timeout_ms, 0), 120_000) / 1000
        out: dict[str, Any] = await _rpc.request(self.nc, self.subjects.tasks(session), e, ev.TYPE_TASK_REPLY, _timeout(self, timeout, wait))
        return out

    async def tasks(self, session: str) -> list[dict[str, Any]]:
        """The session's background tasks, newest first."""
        return list((await self.task_query(session, "list")).get("tasks") or [])

    async def wait_tasks(self, session: str, ids: Sequence[str], timeout: float = 60.0, *, any: bool = False) -> list[dict[str, Any]]:
        """Wait until the tasks ended (``any``: one of them), at most ``timeout`` seconds (120); the tasks as they are then."""
        r = await self.task_query(session, "wait", ids, timeout_ms=max(int(timeout * 1000), 1), any=any)
        return list(r.get("tasks") or [])

    async def cancel_task(self, session: str, task_id: str) -> dict[str, Any]:
        """End a running task interrupted and stop its run; an ended task keeps its end."""
        return dict((await self.task_query(session, "cancel", [task_id]))["tasks"][0])

    async def task_output(self, session: str, task_id: str) -> tuple[dict[str, Any], list[Block]]:
        """The task and its progress output so far."""
        r = await self.task_query(session, "output", [task_id])
        return dict(r["tasks"][0]), [Block.from_json(b) for b in r.get("output") or []]

    async def fetch(self, ref: str | Block, *, session: str | None = None, timeout: float | None = None) -> bytes:
        """The bytes of a stored output (5.9), read through ``P.outputs.<session>`` and checked against its digest.

        An object the router says is larger than ``max_output`` (the output ceiling, 64 MiB by default)
        is refused before a byte is kept, as are bytes past the size it said.
        """
        url = ref.url if isinstance(ref, Block) else ref
        r = parse_ref(url)
        if not r.digest:
            raise ProtocolError(f"{url} has no #sha256=<digest>: give the url exactly as the result has it", "bad_request")
        session = session or r.session
        h = hashlib.sha256()
        out = bytearray()
        size = -1
        while size < 0 or len(out) < size:
            e = _event(self, ev.TYPE_OUTPUT_GET, session, {"url": url, "offset": len(out)})
            ch = await _rpc.request(self.nc, self.subjects.outputs(session), e, ev.TYPE_OUTPUT_CHUNK, _timeout(self, timeout, 30))
            if not isinstance(ch, dict) or not isinstance(ch.get("size"), int) or ch.get("offset") != len(out):
                raise ProtocolError(f"fetch {url}: a malformed output.chunk")
            if ch.get("digest") != r.digest or (size >= 0 and ch["size"] != size):
                raise ToolbusError(f"fetch {url}: the object changed while it was read", "internal")
            size = ch["size"]
            if size > self._off.max:
                raise ProtocolError(f"fetch {url}: the router says {size} bytes, past the output ceiling of {self._off.max} (5.9)")
            part = base64.b64decode(ch.get("data") or "")
            if not part and len(out) < size:
                raise ProtocolError(f"fetch {url}: the router sent no bytes at offset {len(out)}")
            if len(out) + len(part) > size:
                raise ProtocolError(f"fetch {url}: the router sent bytes past the object's size {size}")
            h.update(part)
            out += part
        if h.hexdigest() != r.digest:
            raise ToolbusError(f"fetch {url}: the bytes read do not hash to the url's digest", "internal")
        return bytes(out)

    async def turn(self, session: str, format: str, message: Any, *, user: Any = None, context: Any = None,
                   request: Request | dict[str, Any] | None = None, reply_id: str | None = None,
                   timeout: float | None = None) -> ModelReply:
        """Run the tool calls of a model's message and return the messages that answer them (Go's client.Turn).

        When the message shows that the provider's tool search loaded deferred tools (an OpenAI Responses
        ``tool_search_output`` or a call with a ``namespace``, an Anthropic ``tool_search_tool_result``), it
        asks for the session's deferred listing and puts a ``reset_tools`` call that activates their groups,
        the active ones kept, ahead of the model's calls (4.1, 4.2); its result is not among the messages and
        :attr:`ModelReply.activated` names the groups. A message that loads and calls nothing activates, then
        raises :class:`NoToolCallsError`.
        """
        t = parse_turn(format, message)
        calls: list[Call] = list(t.calls)
        load_id, added = "", list[str]()
        if t.loads:
            tl = await self.tools(session, format, request=request, user=user, deferred=True, timeout=timeout)
            final, added = load_groups(tl, t.loads)
            if added:
                load_id = "toolbus-load"
                n = 1
                while any(c.id == load_id for c in t.calls):
                    load_id, n = f"toolbus-load-{n}", n + 1
                calls.insert(0, Call(load_id, "reset_tools", reset_input(final)))
        if not t.calls and not load_id:
            raise NoToolCallsError("the message has no tool calls")
        reply = await self.call(session, calls, user=user, context=context, request=request, reply_id=reply_id, timeout=timeout)
        if not t.calls:
            raise NoToolCallsError("the message has no tool calls")
        out = t.reply(reply.results, reply.parked)
        if load_id and any(r.id == load_id and r.state == "success" for r in reply.results):
            out.activated = added
        return out


def _event(c: Client, typ: str, session: str, data: Any, reply_id: str | None = None) -> ev.Event:
    """A new event of the client; ``reply_id`` is a batch's own id (a fresh one when empty)."""
    if session and not ev.valid_id(session):
        raise ProtocolError(f"session id {_q(session)} must match ^[A-Za-z0-9_-]{{1,128}}$")
    if reply_id and not ev.valid_id(reply_id):
        raise ProtocolError(f"reply id {_q(reply_id)} must match ^[A-Za-z0-9_-]{{1,128}}$")
    return ev.Event(typ, c.source, data, sessionid=session, id=reply_id or "")

def _timeout(c: Client, timeout: float | None, default: float) -> float:
    if timeout is not None:
        return timeout
    return c.timeout if c.timeout is not None else default

def _batch(c: Client, session: str, calls: Sequence[CallLike] | CallLike, user: Any, context: Any, request: Any,
           events: str | None, reply_id: str | None, expiry: _dt.datetime | float | None, traceparent: str | None) -> ev.Event:
    data: dict[str, Any] = {"calls": _calls(calls)}
    if user is not None:
        data["user"] = user
    if context is not None:
        data["context"] = context
    req = _request(request)
    if req is not None:
        data["request"] = req
    if events:
        data["events"] = events
    rev = c._revs.get(session, 0)
    if rev:
        data["sessionrev"] = rev
    e = _event(c, ev.TYPE_CALL_BATCH, session, data, reply_id)
    if expiry is not None:
        ts = expiry.timestamp() if isinstance(expiry, _dt.datetime) else float(expiry)
        e.expirytime = ev.rfc3339(ts)
    if traceparent:
        e.traceparent = traceparent
    return e

async def _answer(c: Client, subject: str, session: str, reply_id: str, call_id: str, a: Answer, what: str, timeout: float | None) -> None:
    c._revs.pop(session, None)
    e = _event(c, ev.TYPE_ANSWER, session, a.to_json())
    e.replyid, e.toolcallid = reply_id, call_id
    e.validate()
    ack = await _rpc.request(c.nc, subject, e, ev.TYPE_ANSWER_ACK, _timeout(c, timeout, 10))
    if not (isinstance(ack, dict) and ack.get("accepted") is True):
        raise ToolbusError(f"{what} not accepted", "internal")


def stored_blocks(output: list[Block]) -> list[Block]:
    """The references to stored outputs in an output."""
    return [b for b in output if b.is_stored]


__all__ = ["Client", "EventStream", "HandoffStream", "ReplayStream", "Resend", "stored_blocks"]
