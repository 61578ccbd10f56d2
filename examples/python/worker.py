"""Serve py_add on the bus given by NATS_URL: python examples/python/worker.py"""
import asyncio

import toolbus


@toolbus.tool(read_only=True)
async def py_add(a: float, b: float) -> str:
    """Add two numbers and return their sum as text."""
    return f"{a + b:g}"


if __name__ == "__main__":
    asyncio.run(toolbus.serve(py_add))
