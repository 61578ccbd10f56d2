"""Serve an AgentScope tool, as_mul, on the bus given by $NATS_URL (needs
./python[agentscope]): python examples/python/agentscope_tools.py, then
go run ./cmd/toolbus call as_mul '{"a":6,"b":7}' prints 42."""
import asyncio

from agentscope.tool import FunctionTool, Toolkit
from toolbus.agentscope import serve


async def as_mul(a: float, b: float) -> str:
    """Multiply two numbers and return their product as text.

    Args:
        a: The first number.
        b: The second number.
    """
    return f"{a * b:g}"


if __name__ == "__main__":
    asyncio.run(serve(Toolkit(tools=[FunctionTool(as_mul, is_read_only=True)])))
