"""AgentScope tools served on the bus.

``await serve(toolkit)`` or ``await serve([tool, ...])`` registers each tool as a
bus tool with AgentScope's flags (``is_read_only`` → ``read_only``,
``is_concurrency_safe`` → ``concurrency_safe``, ``is_state_injected`` →
``state_injected``), its group (with description and instructions) and, for the
built-ins, the permission matcher their rules use (Bash: the command; Read,
Write, Edit: the file path). A call runs through AgentScope's own
``Toolkit.call_tool``, so JSON repair, state injection, streaming and error texts
are AgentScope's; each chunk of a tool that yields several is sent as progress.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from agentscope.message import ToolCallBlock, ToolResultState
from agentscope.permission import PermissionContext
from agentscope.state import AgentState
from agentscope.tool import FunctionTool, ToolBase, ToolChunk, ToolResponse, Toolkit
from agentscope.tool._utils import _remove_title_field

from ..records import Group, ToolDef
from . import _present as P

#: the session state key holding AgentScope's tool context (read-file cache, ...)
STATE_KEY = "agentscope_tool_context"

_MATCHERS = {"Bash": ("command", "command"), "PowerShell": ("command", "command"),
             "Read": ("path", "file_path"), "Write": ("path", "file_path"), "Edit": ("path", "file_path")}


def _permission(tool: ToolBase) -> str:
    decision = getattr(tool, "_permission", None)
    if isinstance(tool, FunctionTool) and decision is not None:
        b = getattr(decision.behavior, "value", decision.behavior)
        return {"allow": "allow", "ask": "ask"}.get(str(b), "passthrough")
    return "passthrough"


def definition(tool: ToolBase, group: str = "basic") -> ToolDef:
    """The bus definition (section 7.2) of an AgentScope tool."""
    schema = json.loads(json.dumps(tool.input_schema))
    _remove_title_field(schema)
    matcher, field = _MATCHERS.get(tool.name, ("none", ""))
    return ToolDef(
        name=tool.name, input_schema=schema, description=tool.description or "",
        groups=[] if group == "basic" else [group], read_only=bool(tool.is_read_only),
        concurrency_safe=bool(tool.is_concurrency_safe), external=bool(tool.is_external_tool),
        state_injected=bool(tool.is_state_injected), permission=_permission(tool),
        rule_matcher=matcher, rule_field=field,
    )


async def _tools_of(source: Toolkit | Sequence[Any]) -> tuple[list[tuple[ToolBase, str]], list[Group]]:
    """The tools of a Toolkit (with their groups) or of a list. A group's skills
    become the bus group's ``skills`` (visible while it is active, as in
    AgentScope); the skills themselves are served by the router (``--skills``
    or ``toolbus skills push``)."""
    if isinstance(source, Toolkit):
        tools, groups = [], []
        for g in source.tool_groups:
            if g.name != "basic":
                skills = sorted(s.name for s in await g.list_skills())
                groups.append(Group(name=g.name, description=g.description,
                                    instructions=g.instructions or "", skills=skills))
            tools += [(t, g.name) for t in g.tools]
        return tools, groups
    out = []
    for t in source:
        out.append((t if isinstance(t, ToolBase) else FunctionTool(t), "basic"))
    return out, []


def handler(tool: ToolBase) -> Any:
    """The bus handler that runs one AgentScope tool through its own Toolkit."""
    kit = Toolkit(tools=[tool])

    async def run(ctx: Any) -> Any:
        from .. import ToolResult  # the SDK's

        state = AgentState(session_id=ctx.session)
        saved = (ctx.state or {}).get(STATE_KEY) if tool.is_state_injected else None
        if saved:
            state.tool_context = type(state.tool_context).model_validate(saved)
        call = ToolCallBlock(id=ctx.id, name=tool.name, input=json.dumps(ctx.input or {}))
        streamed = False
        final: ToolResponse | None = None
        held: ToolChunk | None = None  # a tool that yields one chunk sends no progress
        async for x in kit.call_tool(call, state):
            if isinstance(x, ToolResponse):
                final = x
            elif isinstance(x, ToolChunk) and x.content:
                if held is not None:
                    await ctx.progress(P.from_blocks(held.content))
                    held = None
                    await ctx.progress(P.from_blocks(x.content))
                elif streamed:
                    await ctx.progress(P.from_blocks(x.content))
                else:
                    held = x
                streamed = streamed or held is None
        assert final is not None
        patch = None
        if tool.is_state_injected:
            patch = {STATE_KEY: state.tool_context.model_dump(mode="json")}
        failed = final.state in (ToolResultState.ERROR, ToolResultState.DENIED, ToolResultState.INTERRUPTED)
        blocks = P.from_blocks(final.content) or ([] if not failed else [{"type": "text", "text": ""}])
        return ToolResult(output=blocks, state="error" if failed else "success",
                          metadata=final.metadata or None, state_patch=patch)

    return run


async def _probe(tool: ToolBase) -> str:
    """A tool class whose own check always allows (AskUser, reset-like tools)
    gets ``permission: allow``; any other answer, or one that needs an input,
    leaves the bus's default (the session's mode and rules decide)."""
    try:
        d = await tool.check_permissions({}, PermissionContext())
    except Exception:
        return "passthrough"
    return "allow" if str(getattr(d.behavior, "value", d.behavior)) == "allow" else "passthrough"


async def _no_run(ctx: Any) -> Any:
    from ..errors import ToolError

    raise ToolError(f"{ctx.name} is an external tool: its caller answers it")


async def serve(source: Toolkit | Sequence[Any], *, url: str | None = None, run: bool = True,
                **worker_kw: Any) -> Any:
    """Serves AgentScope tools on the bus (a Toolkit, or a list of ToolBase
    objects and plain functions). With ``run`` (default) it says so on stderr
    as :func:`toolbus.serve` does and serves until stopped; otherwise it
    returns the started Worker (stop it with ``drain``)."""
    from .. import Worker
    from ..worker import announce

    tools, groups = await _tools_of(source)
    w = await Worker.connect(url, groups=groups, **worker_kw)
    for tool, group in tools:
        d = definition(tool, group)
        if d.permission == "passthrough" and not isinstance(tool, FunctionTool) and tool.name not in _MATCHERS:
            d.permission = await _probe(tool)
        w.handle(d, _no_run if tool.is_external_tool else handler(tool))
    await w.start()
    if run:
        announce(w, url)
        await w.run()
    return w
