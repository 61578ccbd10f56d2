"""Permission modes and rules: the session's mode on the bus (``session.mode``)
against the agent's own PermissionContext mode; a denial reads as AgentScope's."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

from typing import Any, AsyncIterator

import pytest
import pytest_asyncio

from agentscope.agent import Agent
from agentscope.message import UserMsg
from agentscope.permission import PermissionBehavior, PermissionMode, PermissionRule

from scenario import BusToolkit, ScriptedModel, hitl_toolkit, serve, transcript

SCRIPT: list[Any] = [[("deploy", {"env": "prod"}), ("add", {"a": 1, "b": 2})], "done"]


async def inprocess(mode: str, deny: bool) -> dict:
    model = ScriptedModel(SCRIPT)
    agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=hitl_toolkit())
    agent.state.permission_context.mode = PermissionMode(mode)
    if deny:
        agent._engine.add_rule(PermissionRule(tool_name="deploy", rule_content=None,
                                              behavior=PermissionBehavior.DENY, source="test"))
    return transcript(agent, model, await agent.reply(UserMsg(name="u", content="go")))


async def on_bus(url: str, session: str, mode: str) -> dict:
    from toolbus import Client

    worker = await serve(hitl_toolkit(), url=url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(url) as client:
            await client.admin("session.mode", session, {"mode": mode})
            bus = BusToolkit(client, session)
            model = ScriptedModel(SCRIPT)
            agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=bus, middlewares=[bus])
            return transcript(agent, model, await agent.reply(UserMsg(name="u", content="go")))
    finally:
        await worker.drain()


@pytest.mark.parametrize("mode", ["explore", "dont_ask", "bypass"])
async def test_modes(as_router: Router, session: str, mode: str) -> None:
    want = await inprocess(mode, deny=False)
    got = await on_bus(as_router.url, session, mode)
    assert got["results"] == want["results"]
    assert got["final"] == want["final"]


@pytest_asyncio.fixture(scope="module")
async def deny_router(bins: Any) -> AsyncIterator[Router]:
    r = Router(config={"permissions": {"rules": [{"tool": "deploy", "behavior": "deny"}]}})
    try:
        await r.ready()
        yield r
    finally:
        r.stop()


async def test_deny_rule(deny_router: Router, session: str) -> None:
    want = await inprocess("default", deny=True)
    got = await on_bus(deny_router.url, session, "default")
    assert got["results"] == want["results"]
