"""Bad input from every direction, seen by an AgentScope agent on the bus: a tool
that raises, broken JSON from the model, a request the bus refuses, and NATS
going away mid-conversation. Each gets a clear text or error and changes nothing."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

from typing import Any

import pytest

from agentscope.agent import Agent
from agentscope.message import UserMsg

from scenario import BusToolkit, ScriptedModel, run_bus, run_inprocess, serve, toolkit, transcript

SCRIPT: list[Any] = [[("fail", {"why": "boom"}), ("add", "{\"a\": 1, \"b\": "), ("add", "[1, 2]")], "done"]


async def test_raising_tool_and_broken_json(as_router: Router, session: str) -> None:
    want = await run_inprocess(SCRIPT)
    got = await run_bus(as_router.url, session, SCRIPT)
    assert got["results"] == want["results"]
    assert want["results"][0][2:] == ("error", "failed: boom")


async def test_request_refused(as_router: Router, session: str) -> None:
    """A request the bus refuses (agent_only with tools) is an error the
    developer sees at the first listing; nothing runs."""
    from toolbus import Client
    from toolbus.errors import BusError

    async with await Client.connect(as_router.url) as client:
        bus = BusToolkit(client, session, request={"merge_mode": "agent_only", "external_tools": [
            {"name": "x", "description": "", "input_schema": {"type": "object", "properties": {}}}]})
        agent = Agent(name="a", system_prompt="s", model=ScriptedModel(SCRIPT), toolkit=bus, middlewares=[bus])
        with pytest.raises(BusError, match="agent_only cannot include external tools"):
            await agent.reply(UserMsg(name="u", content="go"))


class StopsBus(ScriptedModel):
    """Stops the router (and its NATS) right after the model asked for a tool."""

    def __init__(self, script: list[Any], router: Router) -> None:
        super().__init__(script)
        self.router = router

    async def _call_api(self, *a: Any, **kw: Any) -> Any:
        res = await super()._call_api(*a, **kw)
        if self.step == 1:
            self.router.stop()
        return res


async def test_nats_goes_away(bins: Any, session: str) -> None:
    from toolbus import Client

    r = Router()
    await r.ready()
    try:
        worker = await serve(toolkit(), url=r.url, run=False, heartbeat=1.0)
        client = await Client.connect(r.url, allow_reconnect=False)
        bus = BusToolkit(client, session)
        model = StopsBus([[("add", {"a": 1, "b": 2})], "done"], r)
        agent = Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus])
        with pytest.raises(Exception):
            await agent.reply(UserMsg(name="u", content="go"))  # the next listing fails
        results = transcript(agent, model, UserMsg(name="x", content=""))["results"]
        assert len(results) == 1 and results[0][2] == "error", results
        assert results[0][3].startswith("BusUnavailableError: The call of tool 'add' could not reach the bus"), results
    finally:
        r.stop()
        for c in (client, worker):
            try:
                await (c.close() if c is client else c.drain(timeout=1))
            except Exception:
                pass
