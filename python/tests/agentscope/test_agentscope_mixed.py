"""One AgentScope agent, several turns, tools from a Python worker (serve())
and a Go worker (the router's built-ins): the agent neither knows nor cares
which language answers."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

from typing import Any

from agentscope.agent import Agent
from agentscope.message import UserMsg

from scenario import BusToolkit, ScriptedModel, serve, toolkit, transcript

SCRIPT: list[Any] = [
    [("echo", {"text": "from Go"}), ("add", {"a": 20, "b": 22})],
    [("reset_tools", {"ops": True})],
    [("deploy", {"env": "staging"}), ("get_current_time", {"timezone": "UTC"})],
    "done",
]


async def test_python_and_go_workers(bins: Any, session: str) -> None:
    from toolbus import Client

    r = Router(builtin=True)
    await r.ready()
    try:
        worker = await serve(toolkit(), url=r.url, run=False, heartbeat=1.0)
        try:
            async with await Client.connect(r.url) as client:
                bus = BusToolkit(client, session)
                model = ScriptedModel(SCRIPT)
                agent = Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus])
                got = transcript(agent, model, await agent.reply(UserMsg(name="u", content="go")))
        finally:
            await worker.drain()
    finally:
        r.stop()
    res = {name: (state, text) for _, name, state, text in got["results"]}
    assert res["echo"] == ("success", "from Go")
    assert res["add"] == ("success", "42")
    assert res["reset_tools"][0] == "success"
    assert res["deploy"] == ("success", "deployed to staging")
    assert res["get_current_time"][0] == "success" and res["get_current_time"][1].endswith("Z")
    assert got["final"] == "done"
