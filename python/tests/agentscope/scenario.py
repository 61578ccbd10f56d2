"""One scripted conversation, run with AgentScope's in-process Toolkit and with
the bus-backed one; each run returns a transcript to compare."""
from __future__ import annotations

from typing import Any, Sequence

from agentscope.agent import Agent
from agentscope.message import ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, ToolGroup, Toolkit

from toolbus.agentscope import BusToolkit, ScriptedModel, serve  # noqa: F401 (re-exported for the tests)

ALLOW = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="allowed")


def add(a: float, b: float) -> str:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return str(a + b)


def deploy(env: str) -> str:
    """Deploy the service.

    Args:
        env: Where to deploy.
    """
    return f"deployed to {env}"


def rollback(env: str) -> str:
    """Roll the service back.

    Args:
        env: Where to roll back.
    """
    return f"rolled back {env}"


def fetch_page(url: str) -> str:
    """Fetch a web page.

    Args:
        url: The page.
    """
    return f"<html>{url}</html>"


def fail(why: str) -> str:
    """Always fails.

    Args:
        why: The reason.
    """
    raise RuntimeError(f"failed: {why}")


def toolkit() -> Toolkit:
    """The toolkit both runs use (a fresh one per run)."""
    return Toolkit(
        tools=[FunctionTool(add, is_read_only=True), FunctionTool(fail, is_read_only=True)],
        tool_groups=[
            ToolGroup(name="ops", description="Deploy and roll back.", instructions="Deploy to staging first.",
                      tools=[FunctionTool(deploy, permission=ALLOW, is_concurrency_safe=False),
                             FunctionTool(rollback, permission=ALLOW)]),
            ToolGroup(name="web", description="Browse the web.", instructions="Cite pages.",
                      tools=[FunctionTool(fetch_page, is_read_only=True)]),
            ToolGroup(name="quiet", description="No instructions.", tools=[]),
        ],
    )


GROUPS_SCRIPT: list[Any] = [
    [("add", {"a": 1, "b": 2}), ("deploy", {"env": "x"}), ("nope", {})],          # inactive, unknown
    [("reset_tools", {"ops": True, "bogus": True, "basic": True})],                  # invalid names
    [("reset_tools", {"ops": "maybe"})],                                              # non-bool
    [("reset_tools", '{"ops": "yes", "web": 1}')],                                   # repaired to bools
    [("deploy", {"env": "staging"}), ("fetch_page", {"url": "u"})],
    [("reset_tools", {"quiet": True, "ops": True})],                                 # instructions of one
    [("reset_tools", {"ops": False, "web": False})],                                 # all off
    [("add", {"a": "3", "b": 4}), ("add", {"a": "x"}), ("add", "{\"a\": 1, \"b\": 2")],  # repair, invalid, broken JSON
    [("fail", {"why": "boom"}), ("fetch_page", {"url": "u"})],
    [("reset_tools", {"web": True, "ops": True}), ("rollback", {"env": "prod"})],    # same turn
    "done",
]


def transcript(agent: Agent, model: ScriptedModel, final: Any) -> dict:
    results = []
    for msg in agent.state.context:
        for b in msg.content:
            if isinstance(b, ToolResultBlock):
                out = b.output if isinstance(b.output, str) else "".join(getattr(x, "text", "") for x in b.output)
                results.append((b.id, b.name, str(b.state), out))
    # concurrent calls finish in any order (in AgentScope too): compare in call order
    results.sort(key=lambda r: int(r[0].removeprefix("call")))
    return {"schemas": model.seen_tools, "results": results, "final": final.get_text_content(),
            "system": model.seen_system}


async def run_inprocess(script: Sequence[Any], kit: Toolkit | None = None) -> dict:
    model = ScriptedModel(script)
    agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=kit or toolkit())
    final = await agent.reply(UserMsg(name="u", content="go"))
    return transcript(agent, model, final)


async def run_bus(url: str, session: str, script: Sequence[Any], kit: Toolkit | None = None, **tk: Any) -> dict:
    from toolbus import Client

    worker = await serve(kit or toolkit(), url=url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(url) as client:
            bus = BusToolkit(client, session, **tk)
            model = ScriptedModel(script)
            agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=bus, middlewares=[bus])
            final = await agent.reply(UserMsg(name="u", content="go"))
            return transcript(agent, model, final)
    finally:
        await worker.drain()


# ---- human in the loop: confirmations and an external tool --------------------

from agentscope.event import ConfirmResult, ExternalExecutionResultEvent, UserConfirmResultEvent  # noqa: E402
from agentscope.permission import PermissionContext  # noqa: E402
from agentscope.tool import ToolBase  # noqa: E402


class PickFile(ToolBase):
    """An external tool: whoever drives the agent answers it."""

    name = "pick_file"
    description = "Ask the user to pick a file."
    input_schema = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}
    is_read_only = True
    is_concurrency_safe = True
    is_external_tool = True

    async def check_permissions(self, tool_input: dict, context: PermissionContext) -> PermissionDecision:
        return ALLOW


def hitl_toolkit() -> Toolkit:
    return Toolkit(tools=[FunctionTool(deploy), PickFile(), FunctionTool(add, is_read_only=True)])


HITL_SCRIPT: list[Any] = [
    [("deploy", {"env": "prod"})],
    [("deploy", {"env": "staging"}), ("pick_file", {"prompt": "which?"})],
    [("add", {"a": 1, "b": 1})],
    "done",
]

#: what the person and the other system do, in order: (kind, tool, answer)
HITL_ANSWERS: list[tuple[str, str, Any]] = [
    ("confirm", "deploy", False),
    ("external", "pick_file", "/srv/a.txt"),
    ("confirm", "deploy", True),
]


def waiting(agent: Agent, name: str) -> ToolCallBlock:
    for c in agent.state.get_awaiting_tool_calls(agent.name):
        if c.name == name:
            return c
    raise AssertionError(f"{name} is not waiting; waiting: {agent.state.get_awaiting_tool_calls(agent.name)}")


def agentscope_event(agent: Agent, kind: str, tool: str, answer: Any) -> Any:
    """The answer as AgentScope's own resume event."""
    call = waiting(agent, tool)
    if kind == "confirm":
        return UserConfirmResultEvent(reply_id=agent.state.reply_id,
                                      confirm_results=[ConfirmResult(confirmed=answer, tool_call=call)])
    return ExternalExecutionResultEvent(reply_id=agent.state.reply_id, execution_results=[
        ToolResultBlock(id=call.id, name=call.name, output=answer, state="success")])


async def drive(agent: Agent, answer: Any) -> list[str]:
    """Runs the conversation: the first reply, then one reply per answer;
    ``answer(agent, kind, tool, value)`` returns the input of the next reply."""
    finals = [(await agent.reply(UserMsg(name="u", content="go"))).get_text_content()]
    for kind, tool, value in HITL_ANSWERS:
        finals.append((await agent.reply(await answer(agent, kind, tool, value))).get_text_content())
    return finals


async def hitl_inprocess() -> dict:
    model = ScriptedModel(HITL_SCRIPT)
    agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=hitl_toolkit())

    async def answer(agent: Agent, kind: str, tool: str, value: Any) -> Any:
        return agentscope_event(agent, kind, tool, value)

    finals = await drive(agent, answer)
    return {**transcript(agent, model, UserMsg(name="x", content="")), "finals": finals}


async def hitl_bus(url: str, session: str, answer: Any) -> dict:
    """``answer`` as in drive; it may answer on the bus and return None."""
    from toolbus import Client

    worker = await serve(hitl_toolkit(), url=url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(url) as client:
            bus = BusToolkit(client, session, answer_wait=30.0)
            model = ScriptedModel(HITL_SCRIPT)
            agent = Agent(name="a", system_prompt="You help.", model=model, toolkit=bus, middlewares=[bus])
            finals = await drive(agent, answer)
            return {**transcript(agent, model, UserMsg(name="x", content="")), "finals": finals}
    finally:
        await worker.drain()
