"""Protocol 1.12 (7.1): a worker registers, beats and leaves each tool on its own subject,
``P.register.<tool>``, and each group on ``P.register.group.<group>``; nothing goes to the shared
``P.register`` of 1.11. Watched on a real router, which acknowledges them and takes the leave."""

from __future__ import annotations

import asyncio

import nats

import toolbus
from conftest import unique
from toolbus import event as ev


async def test_registers_beats_and_leaves_per_tool(router, client, session):
    nc = await nats.connect(router.url)
    seen: list[tuple[str, dict]] = []
    wid = unique("py_reg_w")

    async def on(m):  # this worker's requests only (the router's built-in tools beat too)
        data = ev.decode(m.data, m.headers).data
        if isinstance(data, dict) and data.get("worker") == wid:
            seen.append((m.subject, data))

    await nc.subscribe("toolbus.register", cb=on)
    await nc.subscribe("toolbus.register.>", cb=on)
    await toolbus._rpc.synced(nc)
    a, b, group = unique("py_reg_a"), unique("py_reg_b"), unique("py_reg_g")

    @toolbus.tool(name=a, read_only=True)
    async def tool_a() -> str:
        """A."""
        return "a"

    @toolbus.tool(name=b, read_only=True)
    async def tool_b() -> str:
        """B."""
        return "b"

    w = await toolbus.Worker.connect(router.url, id=wid, heartbeat=0.2, groups=[{"name": group, "description": "G."}])
    w.add(tool_a, tool_b)
    try:
        await w.start()
        assert sorted(w.accepted) == sorted([a, b]), w.accepted
        loop = asyncio.get_running_loop()
        end = loop.time() + 30

        def beats(tool: str) -> int:
            return sum(1 for s, d in seen if s == f"toolbus.register.{tool}" and not d.get("leaving"))

        while (beats(a) < 3 or beats(b) < 3) and loop.time() < end:
            await asyncio.sleep(0.05)
        assert beats(a) >= 3 and beats(b) >= 3, seen
        reply = await client.call(session, [{"id": "c1", "name": a, "input": {}}])
        assert reply.results[0].text == "a", reply
    finally:
        await w.drain(timeout=2)
    end = asyncio.get_running_loop().time() + 30
    while asyncio.get_running_loop().time() < end and sum(1 for _, d in seen if d.get("leaving")) < 2:
        await asyncio.sleep(0.05)
    await nc.close()

    assert not [s for s, _ in seen if s == "toolbus.register"], "a registration on the shared subject of 1.11"
    leaves = sorted(s for s, d in seen if d.get("leaving"))
    assert leaves == sorted([f"toolbus.register.{a}", f"toolbus.register.{b}"]), leaves
    for subject, data in seen:
        if data.get("leaving"):
            assert "tools" not in data and "groups" not in data, data
        elif subject == f"toolbus.register.group.{group}":
            assert [g["name"] for g in data["groups"]] == [group] and "tools" not in data, data
        else:
            tool = subject.removeprefix("toolbus.register.")
            assert [t["name"] for t in data["tools"]] == [tool] and "groups" not in data, data
            assert list(data["inflight"]) == [tool] and data["binary_exec"] is data["compact_exec"] is True, data
    assert any(s == f"toolbus.register.group.{group}" for s, _ in seen)
    # The router took both leaves: the tool has no live worker.
    reply = await client.call(session, [{"id": "c2", "name": a, "input": {}}])
    r = reply.results[0]
    assert r.error is not None and r.error.code == "unavailable", r
