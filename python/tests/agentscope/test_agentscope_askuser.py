"""AgentScope's AskUser on the bus: served with serve() it is an external,
read-only tool that never asks for permission; the agent suspends, and the
answer (text for the model, the answers as metadata for programs) comes back
as AgentScope's event or through the CLI (toolbus answer) while it waits."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import asyncio
import json
from typing import Any

from agentscope.agent import Agent
from agentscope.event import ExternalExecutionResultEvent
from agentscope.message import ToolResultBlock, UserMsg
from agentscope.tool import AskUser, Toolkit

from scenario import BusToolkit, ScriptedModel, serve, transcript, waiting
from toolbus.agentscope._present import bus_id, metadata_block

QUESTION = {"questions": [{"question": "Which database?", "header": "Database", "options": [
    {"label": "Postgres", "description": "The server one."}, {"label": "SQLite", "description": "A file."}]}]}
SCRIPT: list[Any] = [[("AskUser", QUESTION)], "done"]
META = {"answers": [{"question": "Which database?", "selected": ["Postgres"], "other": None}]}


def answer_event(agent: Agent) -> ExternalExecutionResultEvent:
    call = waiting(agent, "AskUser")
    return ExternalExecutionResultEvent(reply_id=agent.state.reply_id, execution_results=[
        ToolResultBlock(id=call.id, name="AskUser", output="User chose Postgres.", state="success", metadata=META)])


def meta_of(agent: Agent) -> list[dict]:
    return [b.metadata for m in agent.state.context for b in m.content if isinstance(b, ToolResultBlock)]


async def converse(agent: Agent, model: ScriptedModel, answer: Any) -> tuple[dict, list[str], list[dict]]:
    finals = [(await agent.reply(UserMsg(name="u", content="go"))).get_text_content()]
    finals.append((await agent.reply(await answer(agent))).get_text_content())
    return transcript(agent, model, UserMsg(name="x", content="")), finals, meta_of(agent)


async def test_askuser(as_router: Router, session: str) -> None:
    from toolbus import Client

    async def as_event(agent: Agent) -> Any:
        return answer_event(agent)

    model = ScriptedModel(SCRIPT)
    want = await converse(Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit(tools=[AskUser()])),
                          model, as_event)
    assert want[2] == [META]

    async def on_cli(agent: Agent) -> Any:
        out = json.dumps([{"type": "text", "text": "User chose Postgres."}, metadata_block(META)])
        done = await asyncio.to_thread(as_router.toolbus, "answer", bus_id(waiting(agent, "AskUser").id), out,
                                       "--session", session + "-cli")
        assert done.returncode == 0, done.stderr
        return None

    worker = await serve(Toolkit(tools=[AskUser()]), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            listed = {t["name"]: t for t in (await client.tools(session)).tools}["AskUser"]
            assert listed["external"] and listed["read_only"] and listed["permission"] == "allow"
            for s, answer in ((session, as_event), (session + "-cli", on_cli)):
                bus = BusToolkit(client, s, answer_wait=30.0)
                model = ScriptedModel(SCRIPT)
                agent = Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus])
                got = await converse(agent, model, answer)
                assert got[0]["results"] == want[0]["results"]
                assert got[0]["schemas"] == want[0]["schemas"]
                assert got[1] == want[1]
                assert got[2] == want[2]
    finally:
        await worker.drain()
