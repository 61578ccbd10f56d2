"""Protocol 1.25's catalogue bound (7.1) as the Python worker meets it: a tool rejected
``limit_exceeded`` is not served but registered again every beat, as the Go worker does, and served
once room is freed (``tools.delete``); a tool rejected for another reason stays rejected."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import toolbus
from conftest import start_router, stop_router, unique, wait_ready
from toolbus import event as ev

BOUND = 24  # above the router's built-in tools, below them plus FILL
FILL = 40


def echo_tool(name: str) -> Any:
    @toolbus.tool(name=name, read_only=True)
    async def echo(text: str) -> str:
        """Echo."""
        return text

    return echo


async def until(cond: Any, what: str, within: float = 30.0) -> None:
    end = asyncio.get_running_loop().time() + within
    while not cond():
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


@pytest.fixture
async def bounded(bins: Any, tmp_path: Any) -> Any:
    r = start_router(str(tmp_path), bins, "--heartbeat", "1s", "--max-tools", str(BOUND))
    try:
        await wait_ready(r.url, r.proc, r.log)
        yield r
    finally:
        stop_router(r)


async def test_tool_refused_at_the_bound_comes_back_once_there_is_room(bounded: Any) -> None:
    filler = await toolbus.Worker.connect(bounded.url, id=unique("py_fill"), heartbeat=0.2)
    filler.add(*(echo_tool(unique(f"py_fill{i}")) for i in range(FILL)))
    await filler.start(strict=False)
    assert filler.accepted and filler.rejected, (filler.accepted, filler.rejected)
    assert all(r.reason.startswith(ev.CODE_LIMIT_EXCEEDED + ":") for r in filler.rejected), filler.rejected
    held = filler.accepted[0]
    await filler.drain()  # the catalogue keeps its tools; nobody registers them again

    name = unique("py_late")
    w = await toolbus.Worker.connect(bounded.url, id=unique("py_late_w"), heartbeat=0.2)
    w.add(echo_tool(name))
    c = await toolbus.Client.connect(bounded.url, timeout=20)
    try:
        with pytest.raises(toolbus.RegistrationError, match="limit_exceeded"):
            await w.start()  # strict: the rejection is raised, the worker goes on beating
        assert [r.name for r in w.rejected] == [name]
        assert name in {t["name"] for t in w.registration()["tools"]}, "a full catalogue's rejection is registered again"
        await c.admin("tools.delete", data={"name": held})
        await until(lambda: name in w.accepted and not w.rejected, "the late tool taken after a delete")
        reply = await c.call(unique("s"), [{"id": "c1", "name": name, "input": {"text": "back"}}])
        assert reply.result("c1").text == "back", reply
    finally:
        await c.close()
        await w.drain()


async def test_other_rejections_stay_rejected(router: Any) -> None:
    """A definition rejected for what it is (here past 128 KiB, 1.24) is not registered again: only the
    catalogue's bound is a refusal that room may lift."""
    name = unique("py_huge")

    async def handler(ctx: toolbus.ToolContext) -> str:
        return "never"

    w = await toolbus.Worker.connect(router.url, id=unique("py_huge_w"), heartbeat=0.2)
    w.handle({"name": name, "description": "x" * (130 << 10), "input_schema": {"type": "object"}, "read_only": True}, handler)
    try:
        await w.start(strict=False)
        assert [r.name for r in w.rejected] == [name], w.rejected
        assert not w.rejected[0].reason.startswith(ev.CODE_LIMIT_EXCEEDED), w.rejected
        assert "tools" not in w.registration(), "a definition rejected for what it is is not sent again"
    finally:
        await w.drain()
