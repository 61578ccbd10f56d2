"""Request-scoped tools and merge modes (4.3). AgentScope Python has no request
scope (an app builds a Toolkit per turn), so the in-process side is that
Toolkit: the backend's tools merged with schema-only external tools as the mode
says; the caller answers a request-scoped call as AgentScope's external
execution, and the bus records the answer."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

from typing import Any

import pytest

from agentscope.agent import Agent
from agentscope.message import ToolResultBlock, UserMsg
from agentscope.tool import FunctionTool, Toolkit

from scenario import add, deploy, transcript
from toolbus.agentscope import BusToolkit, ScriptedModel, external_tool, serve

PICK = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}
SCRIPT: list[Any] = [[("add", {"a": 1, "b": 2}), ("pick_file", {"prompt": "which?"}), ("deploy", {"env": "x"})], "done"]


def externals() -> list[Any]:
    return [external_tool("pick_file", "Ask the user to pick a file.", PICK),
            external_tool("deploy", "Deploy, as the caller does it.", {"type": "object", "properties": {"env": {"type": "string"}}})]


def backend() -> list[Any]:
    return [FunctionTool(add, is_read_only=True), FunctionTool(deploy, is_read_only=True)]


async def merged(mode: str) -> Toolkit:
    """The per-turn Toolkit an AgentScope app builds: the backend's tools, then
    the request's added with Toolkit.add_tool (a same-named tool is replaced and
    moves to the end, as the bus lists request-scoped tools after the rest)."""
    if mode == "external_only":
        return Toolkit(tools=externals())
    kit = Toolkit(tools=backend())
    if mode != "agent_only":
        await kit.add_tool(externals())
    return kit


async def converse(agent: Agent, model: ScriptedModel) -> dict:
    final = await agent.reply(UserMsg(name="u", content="go"))
    while agent.state.has_awaiting_tool_calls(agent.name):
        from agentscope.event import ExternalExecutionResultEvent

        calls = agent.state.get_awaiting_tool_calls(agent.name)
        final = await agent.reply(ExternalExecutionResultEvent(reply_id=agent.state.reply_id, execution_results=[
            ToolResultBlock(id=c.id, name=c.name, output=f"answered {c.name}", state="success") for c in calls]))
    return transcript(agent, model, final)


@pytest.mark.parametrize("mode", ["merge_external_priority", "external_only", "agent_only"])
async def test_merge_modes(as_router: Router, session: str, mode: str) -> None:
    model = ScriptedModel(SCRIPT)
    want = await converse(Agent(name="a", system_prompt="s", model=model, toolkit=await merged(mode)), model)
    from toolbus import Client

    worker = await serve(backend(), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session, external_tools=[] if mode == "agent_only" else externals(), merge_mode=mode)
            model = ScriptedModel(SCRIPT)
            got = await converse(Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus]), model)
            parked = await client.admin("parked.list", session)
    finally:
        await worker.drain()
    assert got["results"] == want["results"]
    assert got["schemas"] == want["schemas"]
    assert not (parked or {}).get("parked"), parked  # the answers reached the bus
