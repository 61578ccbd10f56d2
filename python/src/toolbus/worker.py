"""The worker side (docs/protocol.md 5, 7): serve tools on ``P.exec.<tool>``, register and beat."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import nats
import nats.errors

from . import _rpc
from . import event as ev
from .event import _q
from .errors import ProtocolError, RegistrationError, ToolError
from .offload import DEFAULT_INLINE_LIMIT, DEFAULT_MAX_OUTPUT, RESERVE, Offloader, TooLargeError
from .records import Block, Group, Rejection, ToolDef, blocks_json, to_blocks
from .tool import Handler, Tool, ToolContext, ToolResult, tools_of

CANCEL_MEMORY = 120.0
# Cancels remembered at most: any agent may publish cancels naming ids of its choosing, which every worker reads.
MAX_CANCELLED = 65536
DEFAULT_MAX_CONCURRENT = 64


@dataclass
class _Call:
    """A call from arrival to answer."""

    key: str
    tool: str
    task: asyncio.Task[Any] | None = None
    cancelled: bool = False  # by the agent: answer interrupted
    cancel_id: str = ""  # the id of the cancel event that did, named in the result (3.5, 1.30); "": one remembered from before
    cut: bool = False  # by the drain's deadline: no answer


@dataclass
class _Served:
    tool: Tool
    sub: Any = None
    loop: asyncio.Task[Any] | None = None
    rejected: bool = False
    full: bool = False  # rejected for want of room in the catalogue: registered again every beat (7.1, 1.25)
    stats: dict[str, int] = field(default_factory=lambda: {"calls": 0, "errors": 0})


class Worker:
    """Serves tools; one per process is typical. Not thread-safe: use it from one event loop."""

    def __init__(self, nc: Any, *, id: str | None = None, prefix: str = "toolbus", heartbeat: float = ev.DEFAULT_HEARTBEAT,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT, groups: Sequence[Group | dict[str, Any]] = (),
                 inline_limit: int = DEFAULT_INLINE_LIMIT, max_output: int = DEFAULT_MAX_OUTPUT,
                 logger: logging.Logger | None = None, binary_exec: bool = True, compact_exec: bool = True) -> None:
        self.id = id or ev.new_id()
        self.binary_exec = binary_exec
        self.compact_exec = binary_exec and compact_exec
        if not ev.valid_id(self.id):
            raise ValueError(f"worker id {_q(self.id)} must match ^[A-Za-z0-9_-]{{1,128}}$")
        self.nc = nc
        self.subjects = ev.Subjects(prefix)
        self.source = "toolbus/worker/" + self.id
        self.heartbeat = heartbeat if heartbeat > 0 else ev.DEFAULT_HEARTBEAT
        self.max_concurrent = max_concurrent if max_concurrent > 0 else DEFAULT_MAX_CONCURRENT
        self.groups = [g if isinstance(g, Group) else Group.from_json(g, f"groups[{i}]") for i, g in enumerate(groups)]
        self.log = logger or logging.getLogger("toolbus.worker")
        self._off = Offloader(nc, self.subjects.bucket("outputs"), inline_limit, max_output)
        self._tools: dict[str, _Served] = {}
        self._x = _Executor(nc, self.subjects, self.source, self.log, self._off, self.max_concurrent, self.heartbeat, self.compact_exec)
        self._cancel_sub: Any = None
        self._beat: asyncio.Task[Any] | None = None
        self._started = False
        self._stopping = False
        self._stopped = asyncio.Event()
        self._owned = False
        self.accepted: list[str] = []
        self.rejected: list[Rejection] = []
        self.registered = asyncio.Event()

    @classmethod
    async def connect(cls, url: str | None = None, **kw: Any) -> Worker:
        """Connect to NATS (url, else $NATS_URL, else localhost) with endless reconnects; the worker owns the connection."""
        nats_kw = kw.pop("nats_options", {})
        nats_kw.setdefault("name", "toolbus-worker")
        nats_kw.setdefault("max_reconnect_attempts", -1)
        nc = await nats.connect(url or os.environ.get("NATS_URL") or "nats://127.0.0.1:4222", **nats_kw)
        w = cls(nc, **kw)
        w._owned = True
        return w

    # ---- tools ----

    def add(self, *tools: Any) -> Worker:
        """Add tools: @tool functions, @tool classes or instances, or objects holding Tools."""
        for obj in tools:
            for t in tools_of(obj):
                self._add(t)
        return self

    def handle(self, definition: ToolDef | dict[str, Any], handler: Handler | None = None) -> Worker:
        """A raw tool: a definition (decoded strictly) and ``async handler(ctx) -> output``.

        An ``external`` tool needs no handler: it is only registered (its calls park, 6.1).
        """
        d = definition if isinstance(definition, ToolDef) else ToolDef.from_json(definition)
        if handler is None and not d.external:
            raise ValueError(f"tool {_q(d.name)} needs a handler (only an external tool has none)")

        async def none(ctx: ToolContext) -> Any:
            raise ToolError(f"Error: the external tool {d.name} is not run by a worker")

        self._add(Tool(d, handler or none))
        return self

    def _add(self, t: Tool) -> None:
        if self._started:
            raise RuntimeError("worker: tools are added before start()")
        if not ev.valid_name(t.name):
            raise ValueError(f"tool name {_q(t.name)} must match ^[A-Za-z0-9_-]{{1,64}}$")
        if t.name in self._tools:
            raise ValueError(f"tool {_q(t.name)} added twice")
        self._tools[t.name] = _Served(t)

    # ---- lifecycle ----

    async def start(self, *, strict: bool = True) -> None:
        """Subscribe, register and start beating.

        Rejected tools are logged at ERROR, unsubscribed and never served; with ``strict`` a
        RegistrationError is raised afterwards (the accepted tools keep running until stop()).
        """
        if self._started:
            raise RuntimeError("worker: already started")
        self._started = True
        self._cancel_sub = await self.nc.subscribe(self.subjects.all("cancel"), cb=self._x.on_cancel)
        for s in self._tools.values():
            await self._subscribe(s)
        await _rpc.synced(self.nc)
        await self._register(first=True)
        self._beat = asyncio.create_task(_heartbeat(self))
        for s in self._tools.values():
            if not s.rejected:
                self._take_work(s)
        if strict and self.rejected:
            raise RegistrationError("the router rejected " + "; ".join(f"{r.name}: {r.reason}" for r in self.rejected), list(self.rejected))

    async def run(self, *, strict: bool = True) -> None:
        """start() unless started, then serve until stop() or SIGINT/SIGTERM, then drain."""
        if not self._started:
            await self.start(strict=strict)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
            except (NotImplementedError, RuntimeError):
                pass
        await self._stopped.wait()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drain()

    async def stop(self) -> None:
        """drain() with the default timeout."""
        await self.drain()

    async def drain(self, timeout: float = 5.0) -> None:
        """Leave, stop taking calls, let running calls finish (past timeout: cancelled, unanswered), close an owned connection."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = self._x._stopping = True
        try:
            await self._drain(timeout)
        finally:
            if self._owned and not self.nc.is_closed:
                await self.nc.close()
            self._stopped.set()

    async def _drain(self, timeout: float) -> None:
        if not self._started:
            return
        loops = [t for t in [self._beat, *(s.loop for s in self._tools.values())] if t is not None]
        for t in loops:
            t.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        if self.nc.is_connected:
            try:
                # One leave per tool, on its subject (7.1): it touches only that tool's liveness.
                leaves = [(self.subjects.register(n), {"worker": self.id, "leaving": True}) for n in self._tools]
                await _send_all(self, leaves, 1.0)
            except Exception as err:  # noqa: BLE001 - leaving is best effort
                self.log.debug("worker: leaving not acknowledged: %s", err)
        for s in self._tools.values():
            if s.sub is not None:
                try:
                    await s.sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass
                s.sub = None
        pending = set(self._x._tasks)
        if pending:
            done, pending = await asyncio.wait(pending, timeout=timeout)
        if pending:
            self.log.warning("worker: drain deadline passed; %d calls cut off", len(pending))
            for c in self._x._calls.values():
                c.cut = True
                if c.task is not None:
                    c.task.cancel()
            await asyncio.wait(pending, timeout=1.0)
        if self._cancel_sub is not None:
            try:
                await self._cancel_sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass

    # ---- registration ----

    def registration(self) -> dict[str, Any]:
        """What this worker says in every heartbeat (7.1), as one ``io.toolbus.register`` data; since
        protocol 1.12 it travels split per group and tool (``registrations()``)."""
        inflight: dict[str, list[str]] = {}
        for c in self._x._calls.values():
            inflight.setdefault(c.tool, []).append(c.key)
        data: dict[str, Any] = {"worker": self.id}
        if self.groups:
            data["groups"] = [g.to_json() for g in self.groups]
        tools = [s.tool.definition.to_json() for s in self._tools.values() if not s.rejected or s.full]
        if tools:
            data["tools"] = tools
        data.update(self._exec_forms())
        data["inflight"] = inflight
        return data

    def registrations(self) -> list[tuple[str, dict[str, Any]]]:
        """The requests of one beat (7.1, protocol 1.12): ``(subject, data)`` for each group on
        ``P.register.group.<group>`` and each tool on ``P.register.<tool>``, with that tool's definition
        and calls in flight. NATS permissions confine which of these subjects a login may publish."""
        reg = self.registration()
        out: list[tuple[str, dict[str, Any]]] = [
            (self.subjects.register_group(g["name"]), {"worker": self.id, "groups": [g]}) for g in reg.get("groups", [])]
        for t in reg.get("tools", []):
            one: dict[str, Any] = {"worker": self.id, "tools": [t], **self._exec_forms()}
            one["inflight"] = {t["name"]: reg["inflight"].get(t["name"], [])}
            out.append((self.subjects.register(t["name"]), one))
        return out

    def _exec_forms(self) -> dict[str, bool]:
        """The exec forms this worker reads besides structured mode (7.1): binary, and compact (1.16) with it."""
        forms: dict[str, bool] = {}
        if self.binary_exec:
            forms["binary_exec"] = True
        if self.compact_exec:
            forms["compact_exec"] = True
        return forms

    async def _register(self, first: bool = False) -> None:
        try:
            ack = await _send_all(self, self.registrations(), self.heartbeat)
        except Exception as err:  # noqa: BLE001 - the next beat tries again
            (self.log.error if first else self.log.warning)("worker %s: registration not acknowledged: %s", self.id, err)
            return
        self.accepted = [a for a in ack.get("accepted") or [] if isinstance(a, str)]
        for r in ack.get("rejected") or []:
            if not isinstance(r, dict):
                continue
            rej = Rejection(str(r.get("name", "")), str(r.get("reason", "")))
            s = self._tools.get(rej.name)
            if s is not None and not s.rejected:
                s.rejected = True
                # The catalogue's bound (7.1, 1.25) is the one refusal that room may lift: the tool is
                # registered again every beat, as the Go worker does, and served once it is taken.
                s.full = rej.reason.startswith(ev.CODE_LIMIT_EXCEEDED + ":")
                self.rejected.append(rej)
                self.log.error("worker %s: tool %s REJECTED by the router and not served: %s", self.id, rej.name, rej.reason)
                if s.sub is not None:
                    await s.sub.unsubscribe()
                    s.sub = None
            elif s is None:
                self.rejected.append(rej)
                self.log.error("worker %s: registration rejected %s: %s", self.id, rej.name, rej.reason)
        for name in self.accepted:
            s = self._tools.get(name)
            if s is not None and s.full and not self._stopping:
                s.rejected = s.full = False
                self.rejected = [r for r in self.rejected if r.name != name]
                self.log.warning("worker %s: tool %s taken by the router now that the catalogue has room; serving it", self.id, name)
                await self._subscribe(s)
                self._take_work(s)
        self.registered.set()

    async def _subscribe(self, s: _Served) -> None:
        """Takes the tool's execs in its queue group (5.1), unless its calls come otherwise (durable, external)."""
        d = s.tool.definition
        if d.durable or d.external or s.sub is not None:
            return
        s.sub = await self.nc.subscribe(self.subjects.exec(s.tool.name), queue=self.subjects.exec_queue(s.tool.name),
                                        cb=self._x.exec_cb(s), pending_msgs_limit=max(4 * self.max_concurrent, 1024))

    def _take_work(self, s: _Served) -> None:
        """Starts a durable tool's work loop (5.8)."""
        if s.tool.definition.durable and s.loop is None:
            s.loop = asyncio.create_task(_take_work(self._x, s))



class _Executor:
    """Runs calls: decoding, the concurrency bound, cancels (5.4), results and their offloading."""

    def __init__(self, nc: Any, subjects: ev.Subjects, source: str, log: logging.Logger, off: Offloader, max_concurrent: int,
                 heartbeat: float, compact: bool) -> None:
        self.nc, self.subjects, self.source, self.log, self._off = nc, subjects, source, log, off
        self.heartbeat = heartbeat
        self._compact = compact  # answer a compact exec in the compact form (5.2, 1.16)
        self._sem = asyncio.Semaphore(max_concurrent)
        self._calls: dict[str, _Call] = {}
        # key (or reply prefix) -> (when, the cancel's id: "" when not a valid one), in arrival order
        self._cancelled: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False

    def exec_cb(self, s: _Served) -> Callable[[Any], Any]:
        async def cb(msg: Any) -> None:
            await self.accept(s, msg, None)

        return cb


    async def accept(self, s: _Served, msg: Any, work: Any) -> None:
        e: ev.Event | None = None
        err: ProtocolError | None = None
        try:
            e = ev.decode(msg.data, msg.headers)
        except ProtocolError as x:
            err = x
        call: _Call | None = None
        if e is not None and e.sessionid and e.replyid and e.toolcallid:
            call = _Call(f"{e.sessionid}.{e.replyid}.{e.toolcallid}", s.tool.name)
            self._calls[call.key] = call
        if work is None:
            await self._sem.acquire()  # back-pressure: holds this tool's subscription only
        task = asyncio.create_task(self._serve(s, msg, e, err, call, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, s: _Served, msg: Any, e: ev.Event | None, err: ProtocolError | None, call: _Call | None, work: Any) -> None:
        try:
            await self._serve_one(s, msg, e, err, call, work)
        except Exception:  # noqa: BLE001 - never let one call take the worker down
            self.log.exception("worker: serving %s failed", s.tool.name)
        finally:
            self._sem.release()
            if call is not None and self._calls.get(call.key) is call:
                del self._calls[call.key]

    def _decode_exec(self, s: _Served, msg: Any, e: ev.Event | None) -> dict[str, Any]:
        assert e is not None
        if e.type != ev.TYPE_EXEC:
            raise ProtocolError(f"expected {ev.TYPE_EXEC} on {msg.subject}, got {e.type}")
        d = e.data
        if d is None:
            raise ProtocolError(f"{e.type}: data is missing")
        if not isinstance(d, dict) or not isinstance(d.get("call"), dict):
            raise ProtocolError(f"{e.type}: data: the call is missing")
        c = d["call"]
        if not isinstance(c.get("id"), str) or not isinstance(c.get("name", ""), str):
            raise ProtocolError(f"{e.type}: data: call.id and call.name must be strings")
        if c.get("input") is not None and not isinstance(c["input"], dict):  # 5.1: the object that passed the schema
            raise ProtocolError(f"{e.type}: data: call.input must be an object")
        if not isinstance(d.get("attempt", 0), int):
            raise ProtocolError(f"{e.type}: data: attempt must be a number")
        if not (e.sessionid and e.replyid and ev.valid_id(c["id"])):  # decode checked the ids the event carries
            raise ProtocolError("an exec request needs valid sessionid, replyid and call id")
        if c.get("name") != s.tool.name:
            raise ProtocolError(f"call names tool {_q(c.get('name'))} on the subject of {_q(s.tool.name)}")
        return d

    async def _serve_one(self, s: _Served, msg: Any, e: ev.Event | None, err: ProtocolError | None, call: _Call | None, work: Any) -> None:
        try:
            if err is not None:
                raise err
            d = self._decode_exec(s, msg, e)
        except ProtocolError as x:
            await self._refuse(msg, x, work)
            return
        assert e is not None
        if self._stopping and call is not None and call.cut:
            await self._drop(work)
            return
        c = d["call"]
        key = f"{e.sessionid}.{e.replyid}.{c['id']}"
        if call is None:
            call = _Call(key, s.tool.name)
            self._calls[key] = call
        deadline = e.expiry()
        seq = 0
        # Progress goes to the router that sent the call when the exec says it takes it (protocol 5.3, 1.18):
        # on the reply subject (progress_reply) or, for a durable call, on its progress_inbox; else (a router
        # of 1.17) on the session's events.
        inbox = (msg.reply if d.get("progress_reply") is True else None) if work is None else d.get("progress_inbox")
        progress_to = inbox + ".progress" if isinstance(inbox, str) and inbox else self.subjects.events(e.sessionid)

        async def progress(blocks: list[Block]) -> None:
            nonlocal seq
            # Blocks past 60 KiB stored (the rest of MAX_PROGRESS is the event's attributes), as in Go.
            blocks = await self._off.fit(key, blocks, int(self.nc.max_payload) - RESERVE - (ev.MAX_PROGRESS - (4 << 10)))
            seq += 1
            pe = ev.Event(ev.TYPE_CALL_PROGRESS, self.source, {"seq": seq, "output": blocks_json(blocks)}, subject=c["id"],
                          sessionid=e.sessionid, replyid=e.replyid, toolcallid=c["id"], traceparent=e.traceparent,
                          tracestate=e.tracestate)
            body, headers = ev.encode_structured(pe)
            if len(body) > ev.MAX_PROGRESS:
                raise ValueError(f"progress: {len(body)} bytes, more than the {ev.MAX_PROGRESS} a router takes "
                                 "(docs/protocol.md 5.3); not sent")
            await self.nc.publish(progress_to, body, headers=headers)

        ctx = ToolContext(id=c["id"], name=s.tool.name, session=e.sessionid, reply_id=e.replyid,
                          input=c.get("input") if c.get("input") is not None else {}, user=d.get("user"),
                          context=d.get("context"), attempt=d.get("attempt") or 1, state=d.get("state"),
                          deadline=deadline, progress=progress)
        first = self._was_cancelled(key, e.sessionid, e.replyid)
        if first is not None:  # the cancel overtook the request: never start it; the result names it (1.30)
            call.cancelled, call.cancel_id = True, call.cancel_id or first
        res: ToolResult
        if call.cancelled:
            res = ToolResult([Block.text_block(ev.INTERRUPTED_TEXT)], ev.STATE_INTERRUPTED)
        else:
            res = await self._run(s, ctx, call, deadline)
        if call.cut:
            self.log.warning("worker: call cut off by the drain deadline: %s %s", s.tool.name, c["id"])
            await self._drop(work)
            return
        if call.cancelled:
            res = ToolResult([Block.text_block(ev.INTERRUPTED_TEXT)], ev.STATE_INTERRUPTED)
        s.stats["calls"] += 1
        if res.state != ev.STATE_SUCCESS:
            s.stats["errors"] += 1
        data = await self._result_data(s, key, res)
        if call.cancelled and call.cancel_id and data["state"] == ev.STATE_INTERRUPTED:
            data["cancel"] = call.cancel_id  # the router holds the batch's next run until it handled it too (3.5, 1.30)
        out = ev.Event(ev.TYPE_EXEC_RESULT, self.source, data, sessionid=e.sessionid, replyid=e.replyid, toolcallid=c["id"],
                       traceparent=e.traceparent, tracestate=e.tracestate)
        if work is not None:
            await _record(self, s, work, out, deadline)
            return
        if msg.reply:
            if not ev.is_binary(msg.headers):
                body, headers = ev.encode_structured(out)
            elif self._compact and not e.datacontenttype:  # binary without a content type: compact (ev.is_compact, 5.1)
                body, headers = ev.encode_compact(out)
            else:
                body, headers = ev.encode_binary(out)
            try:
                await self.nc.publish(msg.reply, body, headers=headers)
            except Exception as x:  # noqa: BLE001
                self.log.warning("worker: reply failed for %s: %s", c["id"], x)

    async def _run(self, s: _Served, ctx: ToolContext, call: _Call, deadline: float | None) -> ToolResult:
        # The handler runs in this serving task (a task of its own per call cost more than the rest of
        # the call's bookkeeping): the agent's cancel (5.4), the deadline and the drain's cut cancel
        # this task while it awaits the handler. Any cancel ends the handler, not the call: it is answered.
        task = asyncio.current_task()
        assert task is not None
        call.task = task
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = None if deadline is None else asyncio.get_running_loop().call_later(max(deadline - time.time(), 0.0), expire)
        try:
            value = await s.tool.handler(ctx)
        except asyncio.CancelledError:
            if hasattr(task, "uncancel"):  # Python 3.11+: the cancel is handled here
                task.uncancel()
            if expired:
                return _error(f"Error: tool {s.tool.name} did not finish before the call's deadline")
            return ToolResult([Block.text_block(ev.INTERRUPTED_TEXT)], ev.STATE_INTERRUPTED)
        except ToolError as x:
            return _error(str(x))
        except Exception as x:  # noqa: BLE001 - a tool's failure is its result (5.2)
            self.log.info("worker: tool %s raised %r", s.tool.name, x)
            return _error(f"Error: {x}" if str(x) else f"Error: {type(x).__name__}")
        finally:
            call.task = None
            if timer is not None:
                timer.cancel()
        try:
            res = _as_result(value)
        except (TypeError, ValueError, ProtocolError) as x:
            return _error(f"Error: tool {s.tool.name} returned an output that cannot be sent: {x}")
        if ctx.patch is not None:
            res.state_patch = ctx.patch
        if res.state_patch is not None and not s.tool.definition.state_injected:
            return _error(f"Error: tool {s.tool.name} set a state patch but is not state_injected")
        return res

    async def _result_data(self, s: _Served, key: str, res: ToolResult) -> dict[str, Any]:
        blocks: list[Block] = res.output  # _run made them blocks
        extra = 0
        meta_patch = {}
        for k, v in (("metadata", res.metadata), ("state_patch", res.state_patch)):
            if v is not None:
                meta_patch[k] = v
                extra += len(ev.dumps(v))
        if extra > int(self.nc.max_payload) - RESERVE:
            return {"state": "error", "output": [{"type": "text", "text": (
                f"Error: the result of tool '{s.tool.name}' has {extra} bytes of metadata and state patch, more than the NATS "
                f"payload limit of {self.nc.max_payload} bytes allows; the state patch was not applied.")}]}
        try:
            blocks = await self._off.fit(key, blocks, extra, res.state != ev.STATE_SUCCESS)
        except TooLargeError as x:
            self.log.warning("worker: output not kept: %s %s", key, x)
            return {"state": "error", "output": [{"type": "text", "text": (
                f"Error: the output of tool '{s.tool.name}' is {x.size} bytes, more than this worker's limit of {x.limit} bytes; "
                "it was neither sent nor stored.")}]}
        except Exception as x:  # noqa: BLE001
            self.log.warning("worker: output not kept: %s %s", key, x)
            return {"state": "error", "output": [{"type": "text", "text": (
                f"Error: the output of tool '{s.tool.name}' is too large to send inline and could not be stored: {x}")}]}
        return {"state": res.state, "output": blocks_json(blocks), **meta_patch}

    async def _refuse(self, msg: Any, x: ProtocolError, work: Any) -> None:
        if work is not None:
            self.log.warning("worker: malformed durable call dropped: %s", x)
            _stop_beat(work)
            await _quiet(work.term())
            return
        self.log.warning("worker: refused a malformed exec on %s: %s", msg.subject, x.message)
        if msg.reply:
            re = ev.Event(ev.TYPE_ERROR, self.source, {"code": x.code, "message": x.message})
            body, headers = ev.encode_structured(re)
            await _quiet(self.nc.publish(msg.reply, body, headers=headers))

    async def _drop(self, work: Any) -> None:
        if work is not None:
            _stop_beat(work)
            await _quiet(work.nak())  # cut off by the drain: another worker takes it at once

    # ---- cancel (5.4) ----

    def _was_cancelled(self, key: str, session: str, reply_id: str) -> str | None:
        """The id of a cancel of the call or its reply remembered ("": one no result may name), or None."""
        if not self._cancelled:
            return None
        now = time.monotonic()  # a cancel older than CANCEL_MEMORY no longer counts
        for seen in (self._cancelled.get(key), self._cancelled.get(f"{session}.{reply_id}.")):
            if seen is not None and now - seen[0] <= CANCEL_MEMORY:
                return seen[1]
        return None

    async def on_cancel(self, msg: Any) -> None:
        session = self.subjects.token(msg.subject, "cancel")
        if not ev.valid_id(session):
            return
        try:
            e = ev.decode(msg.data, msg.headers)
        except ProtocolError:
            return
        if e.type != ev.TYPE_CALL_CANCEL or not ev.valid_id(e.replyid):
            return
        ids: list[str] = []
        if isinstance(e.data, dict) and isinstance(e.data.get("calls"), list):
            if len(e.data["calls"]) > ev.MAX_CANCEL_CALLS:
                return  # bad input (3.5): no honest cancel names more; nothing is cancelled
            ids = [i for i in e.data["calls"] if isinstance(i, str)]
        now = time.monotonic()
        cancel_id = e.id if ev.valid_id(e.id) else ""  # a megabyte's id would make the result too large to send
        seen = (now, cancel_id)  # one per cancel, shared by the keys it names
        prefix = f"{session}.{e.replyid}."
        keys = {prefix + i: None for i in ids if ev.valid_id(i)} if ids else {prefix: None}  # a dict: "key in keys" below is O(1)
        for k in keys:  # kept in arrival order: the oldest go first, each in O(1)
            self._cancelled[k] = seen
            self._cancelled.move_to_end(k)
        while self._cancelled:
            at = next(iter(self._cancelled.values()))[0]
            if len(self._cancelled) <= MAX_CANCELLED and now - at <= CANCEL_MEMORY:
                break
            self._cancelled.popitem(last=False)
        for key, c in list(self._calls.items()):
            if (not ids and key.startswith(prefix)) or key in keys:
                if not c.cancelled:
                    c.cancel_id = cancel_id
                c.cancelled = True
                if c.task is not None:
                    c.task.cancel()


# ---- durable tools (5.8) ----

async def _take_work(x: _Executor, s: _Served) -> None:
    js = x.nc.jetstream()
    stream, durable = x.subjects.stream("WORK"), x.subjects.work_consumer(s.tool.name)
    retry = min(max(x.heartbeat / 10, 0.05), 1.0)
    psub = None
    while psub is None:
        try:
            info = await js.consumer_info(stream, durable)
            psub = await js.pull_subscribe_bind(durable=durable, stream=stream)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the router makes the consumer at registration
            x.log.debug("worker: work consumer not there yet: %s", err)
            await asyncio.sleep(retry)
    ack_wait = float(info.config.ack_wait or 30.0)
    try:
        while True:
            await x._sem.acquire()
            try:
                msgs = await psub.fetch(1, timeout=5)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                x._sem.release()
                continue
            except asyncio.CancelledError:
                x._sem.release()
                raise
            except Exception as err:  # noqa: BLE001
                x._sem.release()
                x.log.debug("worker: work fetch: %s", err)
                await asyncio.sleep(retry)
                continue
            for m in msgs:
                await _work(x, s, m, ack_wait)
    finally:
        await _quiet(psub.unsubscribe())

async def _work(x: _Executor, s: _Served, m: Any, ack_wait: float) -> None:
    try:
        e = ev.decode(m.data, m.headers)
        exp = e.expiry()
        if exp is not None and time.time() > exp:
            await _quiet(m.term())
            x._sem.release()
            return
    except ProtocolError:
        pass

    async def beat() -> None:
        while True:
            await asyncio.sleep(max(ack_wait / 3, 0.01))
            await _quiet(m.in_progress())

    beater = asyncio.create_task(beat())
    m._toolbus_beater = beater  # stopped once the result is recorded or the call dropped
    await x.accept(s, m, m)


async def _record(x: _Executor, s: _Served, m: Any, out: ev.Event, deadline: float | None) -> None:
    until = (deadline or time.time()) + 60.0
    delay = 0.01
    try:
        while not x.nc.is_closed and time.time() < until:
            try:
                body, headers = ev.encode_structured(out)
                resp = await x.nc.request(x.subjects.result(s.tool.name), body, timeout=5, headers=headers)
                if ev.decode(resp.data, resp.headers).type == ev.TYPE_EXEC_RECORDED:
                    await _quiet(m.ack_sync())
                    return
            except Exception:  # noqa: BLE001 - no router answering: try again
                pass
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)
        x.log.error("worker: durable result not recorded: %s %s", s.tool.name, out.toolcallid)
    finally:
        _stop_beat(m)


async def _send_register(w: Worker, subject: str, data: dict[str, Any], timeout: float) -> dict[str, Any]:
    from ._rpc import request

    e = ev.Event(ev.TYPE_REGISTER, w.source, data)
    ack = await request(w.nc, subject, e, ev.TYPE_REGISTER_ACK, timeout)
    if not isinstance(ack, dict):
        raise ProtocolError("register.ack: data is not an object")
    return ack


async def _send_all(w: Worker, requests: list[tuple[str, dict[str, Any]]], timeout: float) -> dict[str, Any]:
    """Send the requests of one beat at once (one round trip, not one per tool; in order until the first
    registration was acknowledged) and merge the tools' acks; a group's rejection is logged here.
    Raises the first failure when none was acknowledged."""
    if w.registered.is_set():
        acks = await asyncio.gather(*(_send_register(w, s, d, timeout) for s, d in requests), return_exceptions=True)
    else:
        # The first registration goes one request after another: routers list tools and groups in
        # the order of their first registration (7.4), and requests sent at once land in any order.
        acks = []
        for s, d in requests:
            try:
                acks.append(await _send_register(w, s, d, timeout))
            except Exception as err:  # noqa: BLE001 - reported below, like gather's
                acks.append(err)
    out: dict[str, Any] = {"accepted": [], "rejected": []}
    failed: BaseException | None = None
    for (subject, data), ack in zip(requests, acks):
        if isinstance(ack, BaseException):
            failed = failed or ack
        elif "groups" in data:
            for r in ack.get("rejected") or []:
                if isinstance(r, dict):
                    w.log.error("worker %s: group %s REJECTED by the router: %s", w.id, r.get("name"), r.get("reason"))
        else:
            out["accepted"] += ack.get("accepted") or []
            out["rejected"] += ack.get("rejected") or []
    if failed is not None and not out["accepted"] and not out["rejected"]:
        raise failed
    if failed is not None:
        w.log.warning("worker %s: part of a registration not acknowledged: %s", w.id, failed)
    return out


async def _heartbeat(w: Worker) -> None:
    while True:
        await asyncio.sleep(w.heartbeat)
        await w._register()


def _stop_beat(m: Any) -> None:
    """Stop a durable call's +WPI progress beats (5.8)."""
    beater = getattr(m, "_toolbus_beater", None)
    if beater is not None:
        beater.cancel()


def _error(text: str) -> ToolResult:
    return ToolResult([Block.text_block(text)], ev.STATE_ERROR)


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        if value.state not in (ev.STATE_SUCCESS, ev.STATE_ERROR, ev.STATE_INTERRUPTED):
            raise ValueError(f"state {_q(value.state)} is not success, error or interrupted")
        return ToolResult(to_blocks(value.output), value.state, value.metadata, value.state_patch)
    if value is None:
        return ToolResult([])
    if isinstance(value, (str, Block, list, tuple)):
        return ToolResult(to_blocks(value))
    if isinstance(value, (bytes, bytearray)):
        return ToolResult([Block.data_block("application/octet-stream", bytes(value))])
    try:
        return ToolResult([Block.text_block(ev.dumps(value).decode())])
    except (TypeError, ValueError) as x:
        raise TypeError(f"a {type(value).__name__} is neither text, blocks nor JSON") from x


async def _quiet(aw: Any) -> None:
    try:
        await aw
    except Exception:  # noqa: BLE001 - best effort on a message or a connection that may be gone
        pass


async def serve(*tools: Any, url: str | None = None, **worker_kw: Any) -> None:
    """Connect to ``url`` (else $NATS_URL), serve the tools until SIGINT/SIGTERM, then drain.

    Once registered it says so on stderr: ``toolbus: worker <id> serving <tools> on <url>``.
    """
    w = await Worker.connect(url, **worker_kw)
    w.add(*tools)
    await w.start()
    announce(w, url)
    await w.run()


def announce(w: Worker, url: str | None) -> None:
    """Says on stderr that the started worker ``w`` serves: the line a person waits for."""
    served = ", ".join(name for name, s in w._tools.items() if not s.rejected)
    where = _redact(w.nc.connected_url.geturl() if w.nc.connected_url else url or "")
    print(f"toolbus: worker {w.id} serving {served} on {where}", file=sys.stderr, flush=True)


def _redact(urls: str) -> str:
    """``urls`` (comma-separated) with any password or token in them as ``xxxxx``, as Go's natsconn.Redact:
    the line goes to a log (session 39, red team c)."""
    def one(u: str) -> str:
        scheme, sep, rest = u.strip().partition("://")
        userinfo, at, host = rest.rpartition("@")
        if not sep or not at:
            return u
        user, colon, _ = userinfo.partition(":")
        return f"{scheme}://{user + ':xxxxx' if colon else 'xxxxx'}@{host}"
    return ",".join(one(u) for u in urls.split(","))
