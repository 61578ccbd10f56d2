"""Confirmations and external tools: a parked call suspends the AgentScope agent
as AgentScope's own HITL does, and the agent resumes with the answer whether it
comes as AgentScope's event or on the bus (``toolbus confirm``, ``toolbus
answer``) while the agent waits."""
from __future__ import annotations

from as_router import ROOT, Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import asyncio
from typing import Any

import pytest
import pytest_asyncio

from scenario import HITL_SCRIPT, agentscope_event, hitl_bus, hitl_inprocess, waiting

from toolbus.agentscope._present import bus_id



@pytest_asyncio.fixture(scope="module")
async def want():
    return await hitl_inprocess()


def same(want: dict, got: dict) -> None:
    assert got["finals"] == want["finals"]
    assert got["results"] == want["results"]
    assert got["schemas"] == want["schemas"]


async def test_answers_as_agentscope_events(as_router: Router, session: str, want: dict) -> None:
    async def answer(agent: Any, kind: str, tool: str, value: Any) -> Any:
        return agentscope_event(agent, kind, tool, value)

    same(want, await hitl_bus(as_router.url, session, answer))
    parked = as_router.toolbus("parked", "--session", session)
    assert "deploy" not in parked.stdout and "pick_file" not in parked.stdout, parked.stdout


async def test_answers_on_the_bus(as_router: Router, session: str, want: dict) -> None:
    """The person answers with the CLI, the other system with toolbus answer;
    the agent is resumed with reply() and no input, as it would be hours later."""

    async def answer(agent: Any, kind: str, tool: str, value: Any) -> Any:
        call_id = bus_id(waiting(agent, tool).id)
        if kind == "confirm":
            args = ["confirm", call_id, "--session", session] + ([] if value else ["--deny"])
        else:
            args = ["answer", call_id, value, "--session", session]
        out = await asyncio.to_thread(as_router.toolbus, *args)
        assert out.returncode == 0, out.stderr
        return None

    same(want, await hitl_bus(as_router.url, session, answer))


async def test_interrupt_cancels_on_the_bus(as_router: Router, session: str) -> None:
    """UserInterruptEvent on a parked reply ends the call interrupted in the agent
    (AgentScope's own handling) and on the bus (the park is cancelled)."""
    from agentscope.agent import Agent
    from agentscope.event import UserInterruptEvent
    from agentscope.message import UserMsg

    from scenario import BusToolkit, ScriptedModel, hitl_toolkit, serve
    from toolbus import Client

    worker = await serve(hitl_toolkit(), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session)
            agent = Agent(name="a", system_prompt="s", model=ScriptedModel(HITL_SCRIPT), toolkit=bus, middlewares=[bus])
            await agent.reply(UserMsg(name="u", content="go"))
            assert (await client.admin("parked.list", session))["parked"]
            final = await agent.reply(UserInterruptEvent(reply_id=agent.state.reply_id))
            assert final.get_text_content() == "I notice the interruption. How can I help you?"
            end = asyncio.get_running_loop().time() + 30
            while (await client.admin("parked.list", session))["parked"]:
                assert asyncio.get_running_loop().time() < end, "the park was not cancelled"
                await asyncio.sleep(0.05)
    finally:
        await worker.drain()


async def test_edited_confirmation_refused(as_router: Router, session: str) -> None:
    """AgentScope lets a confirmation replace the call's input; the bus confirms
    exactly the parked input, so the adapter refuses the edit and nothing changes."""
    from agentscope.agent import Agent
    from agentscope.event import ConfirmResult, UserConfirmResultEvent
    from agentscope.message import UserMsg

    from scenario import BusToolkit, ScriptedModel, hitl_toolkit, serve
    from toolbus import Client

    worker = await serve(hitl_toolkit(), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session)
            agent = Agent(name="a", system_prompt="s", model=ScriptedModel(HITL_SCRIPT), toolkit=bus, middlewares=[bus])
            await agent.reply(UserMsg(name="u", content="go"))
            call = waiting(agent, "deploy")
            edited = call.model_copy(update={"input": '{"env": "everywhere"}'})
            with pytest.raises(ValueError, match="edited name or input is refused"):
                await agent.reply(UserConfirmResultEvent(reply_id=agent.state.reply_id, confirm_results=[
                    ConfirmResult(confirmed=True, tool_call=edited)]))
            parked = (await client.admin("parked.list", session))["parked"]
            assert [p["input"] for p in parked] == [{"env": "prod"}]
            assert waiting(agent, "deploy").id == call.id
    finally:
        await worker.drain()
