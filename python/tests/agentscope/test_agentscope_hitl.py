"""Confirmations and external tools: a parked call suspends the AgentScope agent
as AgentScope's own HITL does, and the agent resumes with the answer whether it
comes as AgentScope's event or on the bus (``toolbus confirm``, ``toolbus
answer``) while the agent waits."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

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


class Inbox:
    """`toolbus inbox` (docs/inbox.md) on a free port, driven through its HTTP API
    as the page does: the list, then allow / deny / answer bound to the call."""

    TOKEN = "agentscope-inbox-test-token"

    def __init__(self, router: Router) -> None:
        import subprocess

        from as_router import build, free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [str(build("toolbus")), "inbox", "--listen", self.url.removeprefix("http://"),
             "--inbox-token", self.TOKEN, "--nats", router.url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _req(self, path: str, body: dict | None = None) -> Any:
        import json
        import urllib.request

        req = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"X-Toolbus-Token": self.TOKEN, "Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    async def item(self, session: str, call_id: str) -> dict:
        end = asyncio.get_running_loop().time() + 60
        while True:
            try:
                calls = (await asyncio.to_thread(self._req, "/api/calls"))["calls"]
                for it in calls:
                    if it["session"] == session and it["id"] == call_id:
                        return it
            except OSError:
                pass  # not listening yet
            assert asyncio.get_running_loop().time() < end, f"{call_id} never showed in the inbox"
            await asyncio.sleep(0.1)

    async def act(self, it: dict, **action: Any) -> None:
        body = {"key": it["key"], "revision": it["revision"], "input_digest": it["input_digest"], **action}
        out = await asyncio.to_thread(self._req, "/api/act", body)
        assert "code" not in out or not out.get("code"), out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


async def test_answers_in_the_inbox(as_router: Router, session: str, want: dict) -> None:
    """The person allows and denies in the approval inbox, and answers the
    external call there too; the agent resumes with what it gets in-process."""
    inbox = Inbox(as_router)
    try:
        async def answer(agent: Any, kind: str, tool: str, value: Any) -> Any:
            it = await inbox.item(session, bus_id(waiting(agent, tool).id))
            if kind == "confirm":
                await inbox.act(it, action="allow" if value else "deny")
            else:
                await inbox.act(it, action="answer", state="success", format="text", output=value)
            return None

        same(want, await hitl_bus(as_router.url, session, answer))
    finally:
        inbox.stop()


async def test_resumed_by_another_process(as_router: Router, session: str) -> None:
    """The parked agent's state is saved and the process ends; later another
    process (a new client, toolkit and Agent from the saved state) finds the
    answer given meanwhile with toolbus confirm, and the conversation goes on."""
    from agentscope.agent import Agent
    from agentscope.message import UserMsg
    from agentscope.state import AgentState

    from scenario import BusToolkit, ScriptedModel, hitl_toolkit, serve
    from toolbus import Client

    script = [[("deploy", {"env": "prod"})], "done"]
    worker = await serve(hitl_toolkit(), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session)
            agent = Agent(name="a", system_prompt="s", model=ScriptedModel(script), toolkit=bus, middlewares=[bus])
            first = await agent.reply(UserMsg(name="u", content="go"))
            assert first.get_text_content().startswith("I'm waiting")
            call_id = bus_id(waiting(agent, "deploy").id)
            saved = agent.state.model_dump_json()
        out = await asyncio.to_thread(as_router.toolbus, "confirm", call_id, "--session", session)
        assert out.returncode == 0, out.stderr
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session, answer_wait=30.0)
            model = ScriptedModel(script)
            model.step = 1  # the model's next answer
            agent = Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus],
                          state=AgentState.model_validate_json(saved))
            final = await agent.reply()
            assert final.get_text_content() == "done"
            results = [b for m in agent.state.context for b in m.content if getattr(b, "type", "") == "tool_result"]
            assert [(r.name, str(r.state)) for r in results] == [("deploy", "success")]
            assert results[0].output[0].text == "deployed to prod"
    finally:
        await worker.drain()
