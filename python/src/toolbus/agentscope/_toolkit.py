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

from typing import Any, AsyncGenerator, Callable, Sequence

from jinja2 import Template

from agentscope.event import (
    ExternalExecutionResultEvent,
    UserConfirmResultEvent,
    UserInterruptEvent,
)
from agentscope.exception import DeveloperOrientedException
from agentscope.message import AssistantMsg, ToolCallBlock, ToolCallState
from agentscope.middleware import MiddlewareBase
from agentscope.permission import (
    PermissionBehavior,
    PermissionContext,
    PermissionDecision,
    PermissionRule,
)
from agentscope.state import AgentState
from agentscope.tool import ToolBase, ToolChunk, ToolResponse, Toolkit

from .. import records
from . import _present as P
from . import _hitl as H
from . import _running as R
from ._replay import Outcomes


WAITING = "I'm waiting for your permission or the external execution to finish."


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
        self._router_viewer = False
        self._results: dict[str, Any] = {}
        self._outcomes = Outcomes(client, session)
        self._show = R.Presentation(agentscope_texts, self._own_viewer)

    # ---- the model's list -------------------------------------------------

    async def _list(self) -> Any:
        self._listing = await self.client.tools(
            self.session, "toolbus", request=self.request, user=self.user,
        )
        # A name listed twice (a worker's tool named as the router's reset_tools, loader or
        # viewer) runs the router's, listed last (4.3): the model sees that one only. The
        # router's Skill viewer is listed right before the loader (10); any other Skill is a
        # worker's, which the adapter's own viewer (AgentScope's name) replaces.
        tools = self._listing.tools
        last = {t["name"]: i for i, t in enumerate(tools)}
        tools = [t for i, t in enumerate(tools) if last[t["name"]] == i]
        names = [t["name"] for t in tools]
        self._router_viewer = any(a == P.VIEWER and b == P.LOADER for a, b in zip(names, names[1:]))
        if self.skill_viewer and not self._router_viewer:
            tools = [t for t in tools if t["name"] != P.VIEWER]
        self._listing.tools = tools
        self._proxies = {t["name"]: t for t in tools}
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
        local = await Toolkit.get_tool_schemas(self, None)
        # A local tool's name runs the local tool (get_tool): a bus tool of that name, maybe a
        # hostile worker's, must not lend it its description and schema (docs/security.md).
        names = {s["function"]["name"] for s in local}
        for t in tools:
            desc = t.get("description", "")
            if t["name"] == P.RESET and self.agentscope_texts:
                desc = P.RESET_DESCRIPTION
            if t["name"] not in names:
                out.append(P.function_schema(t["name"], desc, t["input_schema"]))
        names = {s["function"]["name"] for s in out}
        return out + [s for s in local if s["function"]["name"] not in names]

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
        return self.skill_viewer and not self._router_viewer

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
            self._results[call.id] = R.error(f"SkillNotFoundError: Skill '{inp['skillId']}' not found.")
            return _allow()
        if call.state == ToolCallState.ALLOWED:
            # confirmed: the bus runs it (or parks it as external) now
            if tool.is_external_tool:
                return _allow()
            res = await self._outcomes.wait(rid, cid, self.call_timeout)
            self._results[call.id] = res
            return _allow()
        try:
            reply = await R.start(self.client, self.session, records.Call(cid, name, inp), rid, self.call_timeout,
                                  user=self.user, context=self.context, request=self.request)
        except Exception as e:  # the bus is unreachable or refused the batch
            self._results[call.id] = R.error(R.failure(call.name, e))
            return _allow()
        if isinstance(reply, R.Running):
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

    async def call_tool(self, tool_call: ToolCallBlock, state: AgentState) -> AsyncGenerator[ToolChunk | ToolResponse, None]:
        if await self._local(tool_call.name) is not None:
            async for x in Toolkit.call_tool(self, tool_call, state):
                yield x
            return
        res = self._results.pop(tool_call.id, None)
        if isinstance(res, R.Running):
            async for x in R.stream(tool_call.name, res, self._show, self.call_timeout):
                yield x
            return
        if res is None:
            raise DeveloperOrientedException(
                "BusToolkit runs calls from the agent's permission step: pass the toolkit in "
                "the Agent's middlewares too (Agent(..., toolkit=tk, middlewares=[tk])).",
            )
        chunk = self._show.chunk(tool_call.name, res)
        yield chunk
        yield ToolResponse(id=tool_call.id).append_chunk(chunk)

    # ---- suspending and resuming -------------------------------------------

    async def on_reply(self, agent: Any, input_kwargs: dict,
                       next_handler: Callable[..., AsyncGenerator]) -> AsyncGenerator:
        inputs = input_kwargs.get("inputs")
        if isinstance(inputs, UserConfirmResultEvent):
            await H.forward_confirmations(self, agent, inputs)
        elif isinstance(inputs, ExternalExecutionResultEvent):
            await H.forward_results(self, agent, inputs)
        elif isinstance(inputs, UserInterruptEvent):
            await H.cancel(self, agent)
        elif inputs is None and agent.state.has_awaiting_tool_calls(agent.name):
            event = await H.resume_event(self, agent)
            if event is None:
                yield AssistantMsg(id=agent.state.reply_id, name=agent.name, content=WAITING)
                return
            input_kwargs = {**input_kwargs, "inputs": event}
        async for item in next_handler(**input_kwargs):
            yield item


def _allow() -> PermissionDecision:
    return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="decided by the bus")


def _as_rule(r: Any) -> PermissionRule:
    d = r if isinstance(r, dict) else r.to_json()
    return PermissionRule(
        tool_name=d["tool"], rule_content=d.get("pattern") or None,
        behavior=PermissionBehavior(d.get("behavior") or "allow"), source="toolbus",
    )


