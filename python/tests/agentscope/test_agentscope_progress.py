"""Progress per call: an AgentScope tool that streams its result chunk by chunk,
served on the bus, streams the same deltas to the agent (ToolResultTextDelta
events) and ends with the same result as in-process."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import asyncio
from typing import Any, AsyncGenerator

from agentscope.agent import Agent
from agentscope.event import ToolResultTextDeltaEvent
from agentscope.message import TextBlock, UserMsg
from agentscope.tool import FunctionTool, Toolkit, ToolChunk

from scenario import BusToolkit, ScriptedModel, add, serve, transcript


async def steps(n: int) -> AsyncGenerator[ToolChunk, None]:
    """Count to n, one chunk per step.

    Args:
        n: How far to count.
    """
    for i in range(1, n + 1):
        await asyncio.sleep(0.05)
        yield ToolChunk(content=[TextBlock(text=f"step {i}\n")], is_last=i == n)


def kit() -> Toolkit:
    return Toolkit(tools=[FunctionTool(steps, is_read_only=True), FunctionTool(add, is_read_only=True)])


SCRIPT: list[Any] = [[("steps", {"n": 3}), ("add", {"a": 1, "b": 2})], "done"]


async def run(agent: Agent, model: ScriptedModel) -> tuple[dict, dict[str, list[str]]]:
    deltas: dict[str, list[str]] = {}
    async for e in agent.reply_stream(UserMsg(name="u", content="go")):
        if isinstance(e, ToolResultTextDeltaEvent):
            deltas.setdefault(e.tool_call_id, []).append(e.delta)
    return transcript(agent, model, UserMsg(name="x", content="")), deltas


async def test_progress_streams_as_deltas(as_router: Router, session: str) -> None:
    from toolbus import Client

    model = ScriptedModel(SCRIPT)
    want, want_deltas = await run(Agent(name="a", system_prompt="s", model=model, toolkit=kit()), model)
    assert want_deltas["call1"] == ["step 1\n", "step 2\n", "step 3\n"]
    worker = await serve(kit(), url=as_router.url, run=False, heartbeat=1.0)
    try:
        async with await Client.connect(as_router.url) as client:
            bus = BusToolkit(client, session)
            model = ScriptedModel(SCRIPT)
            got, got_deltas = await run(Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus]), model)
    finally:
        await worker.drain()
    assert got["results"] == want["results"]
    # the same text streamed; progress is best effort (5.3), so one that comes
    # too late is shown with the result instead of on its own
    assert {k: "".join(v) for k, v in got_deltas.items()} == {k: "".join(v) for k, v in want_deltas.items()}
    assert len(got_deltas["call1"]) > 1, got_deltas
