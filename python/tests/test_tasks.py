"""Background tasks (docs/protocol.md 5.10) through the Python client, on a real router with a Python worker."""

from __future__ import annotations

import asyncio

import pytest

import toolbus
from conftest import unique
from toolbus import event as ev
from toolbus.records import ToolDef


async def test_background_output_wait_cancel(client, worker_factory, session):
    name = unique("py_slow")
    release = asyncio.Event()

    @toolbus.tool(name=name, read_only=True, timeout=0.3)
    async def slow(ctx: toolbus.ToolContext) -> str:
        """Report a step, then wait to be released."""
        await ctx.progress("step 1")
        await release.wait()
        return "done " + ctx.id

    await worker_factory(slow)
    async with client.events(session) as stream:
        reply = await client.call(session, [toolbus.Call("c1", name, {}, background=True),
                                            toolbus.Call("c2", name, {}, background=True)])
        handles = [r.task for r in reply.results]
        assert [r.state for r in reply.results] == ["background", "background"]
        assert all(h and h["state"] == "background" and h["subject"] == f"toolbus.tasks.{session}" for h in handles)
        ids = [h["id"] for h in handles]  # type: ignore[index]

        # The output so far, while it runs (bounded polling: progress is stored asynchronously).
        for _ in range(200):
            task, out = await client.task_output(session, ids[0])
            assert task["state"] == "background"
            if out:
                break
            await asyncio.sleep(0.02)
        assert [b.text for b in out] == ["step 1"]
        assert {t["id"] for t in await client.tasks(session)} == set(ids)

        cancelled = await client.cancel_task(session, ids[1])
        assert cancelled["state"] == "interrupted" and cancelled["result"]["error"]["code"] == "interrupted"

        release.set()
        done = await client.wait_tasks(session, ids, timeout=30)
        assert [t["state"] for t in done] == ["success", "interrupted"]
        assert done[0]["result"]["output"][0]["text"] == "done c1"
        end = await stream.until(ev.TYPE_TASK_DONE, timeout=30)
        assert end.data["id"] in ids


async def test_unknown_task_refused(client, session):
    with pytest.raises(toolbus.ToolbusError) as e:
        await client.task_query(session, "get", ["nope"])
    assert e.value.code == "unknown_task"


async def test_declared_background_and_another_session(client, worker_factory, session):
    """A tool declaring background=True goes on past its timeout without the call asking; another session is refused its tasks."""
    name = unique("py_brew")
    release = asyncio.Event()
    stopped = asyncio.Event()

    @toolbus.tool(name=name, read_only=True, timeout=0.3, background=True)
    async def brew(ctx: toolbus.ToolContext) -> str:
        """Brew until released."""
        await ctx.progress("brewing " + ctx.id)
        try:
            await release.wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "brewed " + ctx.id

    assert brew.definition.to_json()["background"] is True
    await worker_factory(brew)
    listed = await client.tools(session)
    assert [ToolDef.from_json(t).background for t in listed.tools if t["name"] == name] == [True]  # decoded strictly (7.4)

    reply = await client.call(session, [toolbus.Call(c, name, {}) for c in ("c1", "c2", "c3")])
    assert [r.state for r in reply.results] == ["background"] * 3
    ids = [r.task["id"] for r in reply.results]  # type: ignore[index]

    for _ in range(200):  # the output so far, while it runs (progress is stored asynchronously)
        task, out = await client.task_output(session, ids[0])
        if out:
            break
        await asyncio.sleep(0.02)
    assert task["state"] == "background" and [b.text for b in out] == ["brewing c1"]

    other = session + "-other"
    for op in ("get", "cancel", "output", "wait"):
        with pytest.raises(toolbus.ToolbusError) as e:
            await client.task_query(other, op, ids[:1])
        assert e.value.code == "unknown_task", op
    assert [t["state"] for t in await client.wait_tasks(session, ids, timeout=0.05)] == ["background"] * 3

    cancelled = await client.cancel_task(session, ids[2])
    assert cancelled["state"] == "interrupted"
    await asyncio.wait_for(stopped.wait(), 30)  # the run stopped at the worker

    release.set()
    done = await client.wait_tasks(session, ids[:2], timeout=30)
    assert [(t["state"], t["result"]["output"][0]["text"]) for t in done] == [("success", "brewed c1"), ("success", "brewed c2")]
