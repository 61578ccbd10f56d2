"""Call py_add (served by worker.py) on the bus given by $NATS_URL, else
nats://127.0.0.1:4222, and print its result: python examples/python/agent.py"""
import asyncio

import toolbus


async def main() -> None:
    async with await toolbus.Client.connect() as c:
        reply = await c.call("s1", [{"id": "c1", "name": "py_add", "input": {"a": 2, "b": 40}}])
    print(reply.results[0].text)  # 42


if __name__ == "__main__":
    asyncio.run(main())
