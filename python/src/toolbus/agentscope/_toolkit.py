"""BusToolkit: an AgentScope Toolkit whose tools live on the bus.

The agent sees the bus's tool list for its session (groups and reset_tools,
skills, request-scoped tools, the runtime context) and runs its calls there.
The toolkit is also an AgentScope middleware, and must be passed as both::

    tk = BusToolkit(client, "s1")
    agent = Agent(name="a", system_prompt="...", model=model, toolkit=tk, middlewares=[tk])

Why a middleware: the bus decides permissions (section 6.4) and parks calls;
AgentScope suspends a reply only from its permission step (ASK) or for an
external tool. So the permission hook sends the call to the bus and turns the
bus's answer into AgentScope's: a result is ALLOW (call_tool then returns it),
a park for confirmation is ASK (the agent emits RequireUserConfirmEvent and
suspends), a park as external makes the call external (the agent emits
RequireExternalExecutionEvent and suspends). The reply hook forwards AgentScope
confirmations to the bus, and resumes a parked reply with the bus's answer when
``agent.reply()`` is called with no input, however and whenever the answer came.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator, Callable, Sequence

from jinja2 import Template

from agentscope.event import (
    ExternalExecutionResultEvent,
    UserConfirmResultEvent,
    UserInterruptEvent,
)
from agentscope.exception import DeveloperOrientedException
from agentscope.message import (
    AssistantMsg,
    TextBlock,
    ToolCallBlock,
    ToolCallState,
    ToolResultBlock,
    ToolResultState,
)
from agentscope.middleware import MiddlewareBase
from agentscope.permission import (
    PermissionBehavior,
    PermissionContext,
    PermissionDecision,
    PermissionRule,
)
from agentscope.state import AgentState
from agentscope.tool import ToolBase, ToolChunk, ToolResponse, Toolkit

from .. import event as ev
from .. import records
from ..errors import ToolbusError
from ..event import input_digest
from . import _present as P
from ._replay import Outcomes

_STATES = {
    "success": ToolResultState.SUCCESS,
    "error": ToolResultState.ERROR,
    "denied": ToolResultState.DENIED,
    "interrupted": ToolResultState.INTERRUPTED,
}

WAITING = "I'm waiting for your permission or the external execution to finish."


class _Running:
    """A bus call that is running: its event stream, its batch request and the
    progress events not yet shown."""

    def __init__(self, stream: Any, task: Any, call_id: str, pending: list) -> None:
        self.stream, self.task, self.call_id, self.pending = stream, task, call_id, pending


class _BusTool(ToolBase):
    """A bus tool as the agent sees it: schema and flags from the listing; it
    never runs in-process (the permission hook runs it on the bus)."""

    is_mcp = False
    is_state_injected = False

    def __init__(self, name: str, description: str, schema: dict, *, read_only: bool = False,
                 concurrency_safe: bool = True, external: bool = False) -> None:
        super().__init__()
        self.name = name
        self.description = description
        self.input_schema = schema
        self.is_read_only = read_only
        self.is_concurrency_safe = concurrency_safe
        self.is_external_tool = external

    async def check_permissions(self, tool_input: dict, context: PermissionContext) -> PermissionDecision:
        # Only reached without the middleware; the bus decides either way.
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="decided by the bus")

    async def call(self, **kwargs: Any) -> ToolChunk:  # pragma: no cover - never called
        raise DeveloperOrientedException("a bus tool runs on the bus, not in-process")


class BusToolkit(Toolkit, MiddlewareBase):
    """An AgentScope Toolkit (and middleware) backed by the bus session ``session``.

    ``user`` and ``context`` form the runtime context of every batch (3.1);
    ``request`` holds request-scoped tools and the merge mode (4.3), or give
    them as AgentScope tools: ``external_tools`` (schema-only tools the caller
    answers, e.g. :func:`external_tool` or AskUser) and ``merge_mode``. ``tools``
    are local AgentScope tools kept in-process beside the bus's (the agent adds
    its own, e.g. structured output, the same way). ``agentscope_texts``
    (default on) shows AgentScope's texts where the bus's differ: reset_tools'
    description and instructions layout, the ``Skill`` viewer and skill prompt.
    """

    def __init__(self, client: Any, session: str, *, user: Any = None, context: Any = None,
                 request: Any = None, external_tools: Sequence[ToolBase] = (),
                 merge_mode: str = "", tools: list[ToolBase] | None = None,
                 agentscope_texts: bool = True, skill_viewer: bool = True,
                 call_timeout: float = 600.0, answer_wait: float = 0.0) -> None:
        Toolkit.__init__(self, tools=tools)
        self.client = client
        self.session = session
        self.user = user
        self.context = context
        if external_tools or merge_mode:
            if request is not None:
                raise ValueError("give request, or external_tools and merge_mode, not both")
            request = P.request_of(external_tools, merge_mode)
        self.request = request
        self.agentscope_texts = agentscope_texts
        self.skill_viewer = skill_viewer and agentscope_texts
        self.call_timeout = call_timeout
        #: how long ``reply()`` without input waits for a parked call's answer
        self.answer_wait = answer_wait
        self._listing: Any = None
        self._proxies: dict[str, dict] = {}
        self._results: dict[str, Any] = {}
        self._outcomes = Outcomes(client, session)

    # ---- the model's list -------------------------------------------------

    async def _list(self) -> Any:
        self._listing = await self.client.tools(
            self.session, "toolbus", request=self.request, user=self.user,
        )
        self._proxies = {t["name"]: t for t in self._listing.tools}
        return self._listing

    def _skills(self) -> list[tuple[str, str]]:
        if self._listing is None or P.LOADER not in self._proxies:
            return []
        return P.parse_skills_prompt(self._listing.skills_prompt)

    async def get_tool_schemas(self, groups: list[str] | None = None) -> list[dict]:
        listing = await self._list()
        tools = listing.tools
        if self.agentscope_texts:
            active = [g.name for g in listing.groups if g.active]
            tools = P.agentscope_order(tools, active)
        out = []
        if self._own_viewer() and self._skills():
            out.append(P.function_schema(P.VIEWER, P.VIEWER_DESCRIPTION, P.VIEWER_SCHEMA))
        for t in tools:
            desc = t.get("description", "")
            if t["name"] == P.RESET and self.agentscope_texts:
                desc = P.RESET_DESCRIPTION
            out.append(P.function_schema(t["name"], desc, t["input_schema"]))
        names = {s["function"]["name"] for s in out}
        for s in await Toolkit.get_tool_schemas(self, None):
            if s["function"]["name"] not in names:
                out.append(s)
        return out

    async def get_skill_instructions(self, activated_groups: list[str] | None = None) -> str | None:
        await self._list()
        if not self.agentscope_texts:
            return self._listing.skills_prompt or None
        skills = self._skills()
        if not skills:
            return None
        items = [
            {"name": n, "description": d, "dir": f"on the bus: load its files with {P.LOADER}"}
            for n, d in skills
        ]
        viewer = P.VIEWER if self.skill_viewer else P.LOADER
        return Template(self.skill_instruction_template).render(skills=items, skill_viewer=viewer)

    # ---- lookups the agent makes -------------------------------------------

    def _own_viewer(self) -> bool:
        """The adapter offers AgentScope's Skill viewer itself unless the
        router does (``router --skill-viewer``)."""
        return self.skill_viewer and P.VIEWER not in self._proxies

    def _proxy(self, name: str) -> _BusTool | None:
        if name == P.VIEWER and self._own_viewer() and self._skills():
            return _BusTool(P.VIEWER, P.VIEWER_DESCRIPTION, P.VIEWER_SCHEMA, read_only=True,
                            concurrency_safe=False)
        t = self._proxies.get(name)
        if t is None:
            return None
        # reset_tools, the loader and search change what later calls see: never
        # concurrent (the bus's rule, 4.2), so the agent runs them in order
        safe = t.get("concurrency_safe", True) and name not in (P.RESET, P.LOADER, P.SEARCH)
        return _BusTool(name, t.get("description", ""), t["input_schema"],
                        read_only=t.get("read_only", False), concurrency_safe=safe,
                        external=t.get("external", False))

    async def _local(self, name: str) -> ToolBase | None:
        return await Toolkit.get_tool(self, name)

    async def get_tool(self, name: str) -> ToolBase | None:
        local = await self._local(name)
        if local is not None:
            return local
        if self._listing is None:
            await self._list()
        return self._proxy(name)

    async def check_tool_available(self, tool_name: str, activated_groups: list[str]) -> ToolBase:
        local = await self._local(tool_name)
        if local is not None:
            return local
        try:
            await self._list()  # the session as it is now (a reset_tools may have run)
        except Exception:
            if self._listing is None:
                raise
            # the bus is unreachable: the call itself will say so, as its result
        tool = self._proxy(tool_name)
        if tool is None:
            # Unknown or inactive: the bus says which, with AgentScope's texts
            tool = _BusTool(tool_name, "", {"type": "object", "properties": {}})
        return tool

    # ---- running calls -----------------------------------------------------

    def _batch_id(self, state: AgentState, call_id: str) -> str:
        return P.bus_id(state.reply_id, call_id)

    def _bus_call(self, call: ToolCallBlock, tool_input: dict) -> tuple[str, dict]:
        """The bus call a model call stands for (the Skill viewer is the loader)."""
        if call.name == P.VIEWER and self._own_viewer():
            return P.LOADER, {"skillId": tool_input.get("skill"), "path": "SKILL.md"}
        return call.name, tool_input

    async def on_check_permission(self, agent: Any, input_kwargs: dict,
                                  next_handler: Callable[..., Any]) -> PermissionDecision:
        tool = input_kwargs["tool"]
        if not isinstance(tool, _BusTool):
            return await next_handler(**input_kwargs)
        call: ToolCallBlock = input_kwargs["tool_call"]
        rid = self._batch_id(agent.state, call.id)
        cid = P.bus_id(call.id)
        name, inp = self._bus_call(call, input_kwargs["tool_input"])
        if name == P.LOADER and call.name == P.VIEWER and inp["skillId"] not in dict(self._skills()):
            self._results[call.id] = _error(f"SkillNotFoundError: Skill '{inp['skillId']}' not found.")
            return _allow()
        if call.state == ToolCallState.ALLOWED:
            # confirmed: the bus runs it (or parks it as external) now
            if tool.is_external_tool:
                return _allow()
            res = await self._outcomes.wait(rid, cid, self.call_timeout)
            self._results[call.id] = res
            return _allow()
        try:
            reply = await self._start(call.id, records.Call(cid, name, inp), rid)
        except Exception as e:  # the bus is unreachable or refused the batch
            self._results[call.id] = _error(_bus_failure(call.name, e))
            return _allow()
        if isinstance(reply, _Running):
            # it runs (its worker sent progress): no park can follow, the
            # agent streams the rest from call_tool
            self._results[call.id] = reply
            return _allow()
        res = reply.result(cid)
        if res is not None:
            self._results[call.id] = res
            return _allow()
        parked = reply.parked[0]
        if parked.kind == "confirm":
            return PermissionDecision(
                behavior=PermissionBehavior.ASK,
                message=f"The bus asks for a confirmation of {call.name}",
                suggested_rules=[_as_rule(r) for r in parked.suggested_rules],
            )
        tool.is_external_tool = True  # parked as external: the agent suspends
        return _allow()

    async def _start(self, key: str, call: Any, rid: str) -> Any:
        """Sends a one-call batch; returns its reply, or a _Running as soon as
        the call's first progress arrives (so it is running, not parked)."""
        stream = self.client.events(self.session)
        await stream.__aenter__()
        task = asyncio.ensure_future(self.client.call(
            self.session, [call], reply_id=rid, user=self.user, context=self.context,
            request=self.request, timeout=self.call_timeout,
        ))
        try:
            while True:
                getter = asyncio.ensure_future(stream.next(timeout=self.call_timeout))
                done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    getter.cancel()
                    await stream.aclose()
                    return task.result()
                e = getter.result()
                if e.type == ev.TYPE_CALL_PROGRESS and e.replyid == rid and e.toolcallid == call.id:
                    return _Running(stream, task, call.id, [e])
        except BaseException:
            task.cancel()
            await stream.aclose()
            raise

    async def _stream(self, name: str, run: "_Running") -> AsyncGenerator[ToolChunk | ToolResponse, None]:
        """A running bus call: its progress as chunks (AgentScope's deltas), then
        its result (only what progress has not shown yet is sent as a delta)."""
        sent = ""
        try:
            while True:
                for e in run.pending:
                    blocks = P.to_blocks((e.data or {}).get("output", []))
                    sent += "".join(b.text for b in blocks if isinstance(b, TextBlock))
                    yield ToolChunk(content=blocks, state=ToolResultState.RUNNING, is_last=False)
                run.pending = []
                if run.task.done():
                    # progress published before the result may still be on
                    # its way through the event subscription: take what came
                    late = await _drain(run.stream, run.call_id)
                    if not late:
                        break
                    run.pending = late
                    continue
                getter = asyncio.ensure_future(run.stream.next(timeout=self.call_timeout))
                done, _ = await asyncio.wait({run.task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done and getter.exception() is None:
                    e = getter.result()
                    if e.type == ev.TYPE_CALL_PROGRESS and e.toolcallid == run.call_id:
                        run.pending.append(e)
                else:
                    getter.cancel()
            try:
                res = run.task.result().result(run.call_id)
                final = self._chunk(name, res) if res is not None else _error(
                    f"BusError: the call of tool '{name}' has no result.")
            except Exception as e:
                final = _error(_bus_failure(name, e))
        finally:
            await run.stream.aclose()
        text = final.content[0].text if len(final.content) == 1 and isinstance(final.content[0], TextBlock) else None
        if text is None or not sent or not text.startswith(sent):
            yield final
        elif text != sent:
            yield ToolChunk(content=[TextBlock(text=text[len(sent):])], state=final.state, is_last=True)
        yield ToolResponse(id=final.id).append_chunk(final)

    async def call_tool(self, tool_call: ToolCallBlock, state: AgentState) -> AsyncGenerator[ToolChunk | ToolResponse, None]:
        if await self._local(tool_call.name) is not None:
            async for x in Toolkit.call_tool(self, tool_call, state):
                yield x
            return
        res = self._results.pop(tool_call.id, None)
        if isinstance(res, _Running):
            async for x in self._stream(tool_call.name, res):
                yield x
            return
        if res is None:
            raise DeveloperOrientedException(
                "BusToolkit runs calls from the agent's permission step: pass the toolkit in "
                "the Agent's middlewares too (Agent(..., toolkit=tk, middlewares=[tk])).",
            )
        chunk = self._chunk(tool_call.name, res)
        yield chunk
        yield ToolResponse(id=tool_call.id).append_chunk(chunk)

    def _chunk(self, name: str, res: Any) -> ToolChunk:
        if isinstance(res, ToolChunk):
            return res
        output, meta = P.split_metadata(res.output)
        blocks = P.to_blocks(output)
        if self.agentscope_texts and res.state == "denied" and blocks and isinstance(blocks[0], TextBlock):
            blocks[0].text = P.denied_text(blocks[0].text)
        if self.agentscope_texts and res.state == "success" and blocks and isinstance(blocks[0], TextBlock):
            if name == P.RESET:
                blocks[0].text = P.reset_text(blocks[0].text)
            elif name == P.VIEWER and self.skill_viewer:
                blocks[0].text = P.skill_body(blocks[0].text)
        if isinstance(res.metadata, dict):
            meta = {**res.metadata, **meta}
        return ToolChunk(content=blocks, state=_STATES.get(res.state, ToolResultState.ERROR), metadata=meta)

    # ---- suspending and resuming -------------------------------------------

    async def on_reply(self, agent: Any, input_kwargs: dict,
                       next_handler: Callable[..., AsyncGenerator]) -> AsyncGenerator:
        inputs = input_kwargs.get("inputs")
        if isinstance(inputs, UserConfirmResultEvent):
            await self._forward_confirmations(agent, inputs)
        elif isinstance(inputs, ExternalExecutionResultEvent):
            await self._forward_results(agent, inputs)
        elif isinstance(inputs, UserInterruptEvent):
            # the agent ends its waiting calls interrupted: so does the bus (3.5)
            for c in agent.state.get_awaiting_tool_calls(agent.name):
                if await self._local(c.name) is None:
                    await self.client.cancel(self.session, self._batch_id(agent.state, c.id), [P.bus_id(c.id)])
        elif inputs is None and agent.state.has_awaiting_tool_calls(agent.name):
            event = await self._resume_event(agent)
            if event is None:
                yield AssistantMsg(id=agent.state.reply_id, name=agent.name, content=WAITING)
                return
            input_kwargs = {**input_kwargs, "inputs": event}
        async for item in next_handler(**input_kwargs):
            yield item

    def _is_bus(self, name: str) -> bool:
        return name in self._proxies or (name == P.VIEWER and self.skill_viewer)

    async def _forward_confirmations(self, agent: Any, event: UserConfirmResultEvent) -> None:
        """An AgentScope confirmation of a bus-parked call goes to the bus first:
        the bus records who answered and runs the call (6.3)."""
        waiting = {c.id: c for c in agent.state.get_awaiting_tool_calls(agent.name)}
        for cr in event.confirm_results:
            call = waiting.get(cr.tool_call.id)
            if call is None or await self._local(call.name) is not None:
                continue
            if cr.confirmed and (cr.tool_call.name != call.name or _parse(cr.tool_call.input) != _parse(call.input)):
                raise ValueError(
                    f"tool call {call.id} waits on the bus for a confirmation of its input as it is: "
                    "an edited name or input is refused (docs/protocol.md 6.3)",
                )
        for cr in event.confirm_results:
            call = waiting.get(cr.tool_call.id)
            if call is None or await self._local(call.name) is not None:
                continue
            rid = self._batch_id(agent.state, call.id)
            name, inp = self._bus_call(call, _parse(call.input))
            rules = [_bus_rule(r) for r in (cr.rules or [])] if cr.confirmed else None
            try:
                await self.client.confirm(
                    name, self.session, rid, P.bus_id(call.id), cr.confirmed,
                    input_digest=input_digest(inp), rules=rules or None,
                )
            except ToolbusError as e:
                # answered on the bus meanwhile: the bus's answer stands
                if e.code not in ("already_answered", "not_parked"):
                    raise

    async def _forward_results(self, agent: Any, event: ExternalExecutionResultEvent) -> None:
        """An AgentScope external result of a bus-parked call answers it on the
        bus first (6.3), so the bus's record, handlers and inbox agree."""
        waiting = {c.id: c for c in agent.state.get_awaiting_tool_calls(agent.name)
                   if c.state == ToolCallState.SUBMITTED}
        for r in event.execution_results:
            call = waiting.get(r.id)
            if call is None or await self._local(call.name) is not None:
                continue
            state = "error" if str(r.state) in ("error", "denied", "interrupted") else "success"
            try:
                await self.client.answer(call.name, self.session, self._batch_id(agent.state, call.id),
                                         P.bus_id(call.id), _answer_output(r), state=state)
            except ToolbusError as e:
                if e.code not in ("already_answered", "not_parked"):
                    raise

    async def _resume_event(self, agent: Any) -> Any:
        """The AgentScope event that resumes a parked reply with what the bus
        knows now, or None when no parked call has its answer yet."""
        awaiting = agent.state.get_awaiting_tool_calls(agent.name)
        found = await self._outcomes.find(
            [(self._batch_id(agent.state, c.id), P.bus_id(c.id)) for c in awaiting],
            wait=self.answer_wait,
        )
        executed, confirmed = [], []
        for c in awaiting:
            res = found.get((self._batch_id(agent.state, c.id), P.bus_id(c.id)))
            if res is None:
                continue
            if c.state == ToolCallState.SUBMITTED:
                chunk = self._chunk(c.name, res)
                executed.append(ToolResultBlock(id=c.id, name=c.name, output=chunk.content,
                                                state=chunk.state, metadata=chunk.metadata))
            elif c.state == ToolCallState.ASKING:
                confirmed.append(c)
        if executed:
            return ExternalExecutionResultEvent(reply_id=agent.state.reply_id, execution_results=executed)
        if confirmed:
            from agentscope.event import ConfirmResult

            return UserConfirmResultEvent(
                reply_id=agent.state.reply_id,
                confirm_results=[ConfirmResult(confirmed=True, tool_call=c) for c in confirmed],
            )
        return None


async def _drain(stream: Any, call_id: str, wait: float = 0.02) -> list:
    """The progress events of call_id that arrive within ``wait`` seconds."""
    out = []
    while True:
        try:
            e = await stream.next(timeout=wait)
        except Exception:
            return out
        if e.type == ev.TYPE_CALL_PROGRESS and e.toolcallid == call_id:
            out.append(e)


def _answer_output(r: ToolResultBlock) -> list[dict]:
    out = P.from_blocks(r.output)
    if r.metadata:
        out.append(P.metadata_block(r.metadata))
    return out


def _bus_failure(tool: str, e: Exception) -> str:
    """The text the model reads when the bus did not take a call (AgentScope
    shows a failing tool's exception text)."""
    from ..errors import BusError, TimeoutError as BusTimeout

    if isinstance(e, BusTimeout):
        return (f"BusTimeoutError: The bus did not answer the call of tool '{tool}' in time; "
                "it may still run. Do not call it again before checking its effect.")
    if isinstance(e, BusError):
        return f"BusError: The bus refused the call of tool '{tool}': {e}. It did not run."
    return f"BusUnavailableError: The call of tool '{tool}' could not reach the bus ({e}). It did not run."


def _allow() -> PermissionDecision:
    return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="decided by the bus")


def _error(text: str) -> ToolChunk:
    return ToolChunk(content=[TextBlock(text=text)], state=ToolResultState.ERROR)


def _parse(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw


def _as_rule(r: Any) -> PermissionRule:
    d = r if isinstance(r, dict) else r.to_json()
    return PermissionRule(
        tool_name=d["tool"], rule_content=d.get("pattern") or None,
        behavior=PermissionBehavior(d.get("behavior") or "allow"), source="toolbus",
    )


def _bus_rule(r: PermissionRule) -> Any:
    beh = r.behavior.value if hasattr(r.behavior, "value") else str(r.behavior)
    return records.Rule(tool=r.tool_name, pattern=r.rule_content or "", behavior=beh)
