"""An AgentScope agent whose tools run on the bus ($NATS_URL): one scripted turn
calls py_add (served by worker.py). Usage: python agentscope_agent.py SESSION"""
import asyncio
import sys

from agentscope.agent import Agent
from agentscope.message import UserMsg
from toolbus import Client
from toolbus.agentscope import BusToolkit, ScriptedModel


async def main(session: str) -> None:
    async with await Client.connect() as client:
        tools = BusToolkit(client, session)
        model = ScriptedModel([[("py_add", {"a": 2, "b": 40})], "done"])
        agent = Agent(name="assistant", system_prompt="You add numbers.", model=model,
                      toolkit=tools, middlewares=[tools])
        await agent.reply(UserMsg(name="user", content="What is 2 + 40?"))
        for block in agent.state.context[-1].get_content_blocks("tool_result"):
            print(block.output if isinstance(block.output, str) else block.output[0].text)


asyncio.run(main(sys.argv[1]))
