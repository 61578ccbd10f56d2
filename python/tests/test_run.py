"""Running Python tools: cancellation, large outputs, state injection, durable tools, drain."""

from __future__ import annotations

import asyncio

import toolbus
from conftest import unique
from toolbus import event as ev


async def test_cancel_running_python_tool(client, worker_factory, session):
    name = unique("py_forever")
    saw_cancel = asyncio.Event()

    @toolbus.tool(name=name, read_only=True)
    async def forever(ctx: toolbus.ToolContext) -> str:
        await ctx.progress("started")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            saw_cancel.set()
            raise
        return "never"

    await worker_factory(forever)
    async with client.events(session) as stream:
        rid = await client.publish(session, [{"id": "c1", "name": name, "input": {}}])
        await stream.until(ev.TYPE_CALL_PROGRESS, reply_id=rid)
        await client.cancel(session, rid, ["c1"])
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id=rid)
    await asyncio.wait_for(saw_cancel.wait(), 10)
    r = toolbus.Result.from_json(done.data["results"][0])
    assert r.state == "interrupted" and r.text == ev.INTERRUPTED_TEXT


async def test_large_output_offloaded_and_fetched(client, worker_factory, session):
    name = unique("py_big")
    text = "".join(f"line {i:08d}: the quick brown fox\n" for i in range(100_000))  # ~3.3 MB
    blob = bytes(range(256)) * 8192  # 2 MiB of binary data

    @toolbus.tool(name=name, read_only=True)
    async def big() -> list:
        return [toolbus.Block.text_block(text), toolbus.Block.data_block("application/octet-stream", blob)]

    await worker_factory(big)
    reply = await client.call(session, [{"id": "c1", "name": name, "input": {}}])
    r = reply.results[0]
    assert r.ok, r
    refs = [b for b in r.output if b.is_stored]
    assert len(refs) == 2 and all("#sha256=" in b.url for b in refs)
    assert "is too large to show here" in r.output[0].text and r.output[0].text.startswith("line 00000000")
    by_media = {b.media_type: b for b in refs}
    assert (await client.fetch(by_media["text/plain; charset=utf-8"])).decode() == text
    assert await client.fetch(by_media["application/octet-stream"].url) == blob
    # Another session cannot read it.
    try:
        await client.fetch(refs[0].url, session=session + "-other")
        raise AssertionError("read another session's output")
    except toolbus.BusError as err:
        assert err.code == "bad_request" and "no output" in err.message


async def test_large_output_go_builtin_fetched(client, session, router):
    # A Go worker (the router's built-in echo) stores what does not fit; Python reads it back.
    text = "x" * 500_000  # the fixture's router stores built-in outputs past 256 KiB
    reply = await client.call(session, [{"id": "c1", "name": "echo", "input": {"text": text}}])
    r = reply.results[0]
    refs = [b for b in r.output if b.is_stored]
    assert r.ok and refs, r
    assert text in (await client.fetch(refs[0])).decode()


async def test_state_injection_and_context(client, worker_factory, session):
    name = unique("py_count")

    @toolbus.tool(name=name, read_only=False, permission="allow")
    async def count(state: toolbus.State, ctx: toolbus.ToolContext) -> str:
        n = int(state.get("count", 0)) + 1
        ctx.patch_state({"count": n})
        return f"{n} {ctx.context_value('tenant')}"

    assert count.definition.state_injected and "state" not in count.definition.input_schema["properties"]
    await worker_factory(count)
    for want in ("1 acme", "2 acme"):
        reply = await client.call(session, [{"id": "c1", "name": name}], context={"tenant": "acme"})
        assert reply.results[0].text == want, reply


async def test_durable_tool(client, worker_factory, session):
    name = unique("py_durable")

    @toolbus.tool(name=name, read_only=True, durable=True)
    async def durable(x: int, ctx: toolbus.ToolContext) -> str:
        await ctx.progress("working")
        return str(x * 2)

    await worker_factory(durable)
    async with client.events(session) as stream:
        reply = await client.call(session, [{"id": "c1", "name": name, "input": {"x": 21}}], timeout=60)
        assert reply.results[0].text == "42", reply
        # The progress went to the progress_inbox of the exec, and the router published it (5.8, 1.18).
        p = await stream.until(ev.TYPE_CALL_PROGRESS, call_id="c1", timeout=30)
    assert p.source.startswith("toolbus/router/") and p.data["output"][0]["text"] == "working", p


async def test_drain_lets_running_calls_finish(client, router, session):
    name = unique("py_drain")
    started = asyncio.Event()

    @toolbus.tool(name=name, read_only=True)
    async def slow() -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "finished"

    w = await toolbus.Worker.connect(router.url, heartbeat=1.0)
    w.add(slow)
    await w.start()
    call = asyncio.create_task(client.call(session, [{"id": "c1", "name": name}]))
    await asyncio.wait_for(started.wait(), 20)
    await w.drain(timeout=10)
    reply = await call
    assert reply.results[0].text == "finished"
    assert w.nc.is_closed


async def test_class_and_pydantic_tools_and_inflight(client, worker_factory, session):
    pydantic = __import__("pytest").importorskip("pydantic")

    class Order(pydantic.BaseModel):
        item: str
        qty: int = 1

    name_model, name_class = unique("py_order"), unique("py_counter")

    @toolbus.tool(name=name_model, read_only=True)
    async def order(o: Order) -> str:
        """Place an order."""
        return f"{o.qty} x {o.item}"

    gate = asyncio.Event()
    running = asyncio.Event()

    @toolbus.tool(name=name_class, read_only=True)
    class Counter:
        """Count calls."""

        def __init__(self) -> None:
            self.n = 0

        async def __call__(self, step: int, ctx: toolbus.ToolContext) -> str:
            self.n += step
            if step == 0:
                running.set()
                await gate.wait()
            return str(self.n)

    w = await worker_factory(order, Counter())
    reply = await client.call(session, [{"id": "c1", "name": name_model, "input": {"item": "tea"}},
                                        {"id": "c2", "name": name_model, "input": {"item": 5}},
                                        {"id": "c3", "name": name_class, "input": {"step": 2}},
                                        {"id": "c4", "name": name_class, "input": {"step": 3}}])
    by = {r.id: r for r in reply.results}
    assert by["c1"].text == "1 x tea"
    assert by["c2"].error.code == "invalid_input"  # the router checks the model's schema first
    assert sorted([by["c3"].text, by["c4"].text]) in (["2", "5"], ["3", "5"])
    # A running call is listed in the heartbeat (5.7) until it is answered.
    call = asyncio.create_task(client.call(session, [{"id": "c5", "name": name_class, "input": {"step": 0}}], reply_id="t5"))
    await asyncio.wait_for(running.wait(), 20)
    assert w.registration()["inflight"] == {name_class: [f"{session}.t5.c5"]}
    gate.set()
    assert (await call).results[0].ok
    assert w.registration()["inflight"] == {}


DYING_WORKER = """
import asyncio, sys, toolbus

@toolbus.tool(name="py_durable_die", read_only=True, durable=True)
async def die(x: int) -> str:
    print("taken", flush=True)
    await asyncio.sleep(3600)
    return "never"

asyncio.run(toolbus.serve(die, url=sys.argv[1], heartbeat=1.0))
"""


async def test_durable_call_survives_its_worker(bins, tmpdir_session):
    """A durable call whose Python worker is killed mid-call is run to completion by another worker (5.8)."""
    import subprocess
    import sys

    from conftest import ROOT, start_router, stop_router, wait_ready

    r = start_router(tmpdir_session, bins, "--heartbeat", "1s", "--work-ack-wait", "2s")
    dying = None
    try:
        await wait_ready(r.url, r.proc, r.log)
        dying = subprocess.Popen([sys.executable, "-c", DYING_WORKER, r.url], stdout=subprocess.PIPE,
                                 env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "python" / "src")})
        c = await toolbus.Client.connect(r.url)
        while "py_durable_die" not in (await c.tools("d")).names:
            await asyncio.sleep(0.1)
        call = asyncio.create_task(c.call("d", [{"id": "c1", "name": "py_durable_die", "input": {"x": 21}}], timeout=120))
        assert dying.stdout is not None
        line = await asyncio.to_thread(dying.stdout.readline)
        assert line.strip() == b"taken"
        dying.kill()
        dying.wait(20)

        @toolbus.tool(name="py_durable_die", read_only=True, durable=True)
        async def finish(x: int) -> str:
            return str(2 * x)

        w = await toolbus.Worker.connect(r.url, heartbeat=1.0)
        w.add(finish)
        await w.start()
        reply = await asyncio.wait_for(call, 120)
        assert reply.results[0].ok and reply.results[0].text == "42", reply
        await w.drain()
        await c.close()
    finally:
        if dying is not None and dying.poll() is None:
            dying.kill()
        stop_router(r)


async def test_handler_runs_in_the_serving_task():
    """The deadline, the agent's cancel, the drain's cut and a cancel from outside end a handler
    (worker._Executor._run), not the call: it gets its answer."""
    import logging
    import sys
    import time

    from toolbus.worker import _Call, _Executor, _Served

    entered = asyncio.Event()

    @toolbus.tool(name="py_wait", read_only=True)
    async def wait(mode: str) -> str:
        entered.set()
        if mode == "raise":
            raise asyncio.CancelledError()  # the handler's own, nobody cancelled it
        await asyncio.sleep(3600)
        return "never"

    x = _Executor(None, ev.Subjects(), "toolbus/worker/t", logging.getLogger("t"), None, 4, 5.0, True)
    s = _Served(wait)

    def ctx(mode: str) -> toolbus.ToolContext:
        return toolbus.ToolContext(id="c1", name="py_wait", session="s1", reply_id="r1", input={"mode": mode}, user=None,
                                   context=None, attempt=1, state=None, deadline=None)

    res = await x._run(s, ctx("sleep"), _Call("k", "py_wait"), time.time() + 0.05)
    assert (res.state, res.output[0].text) == ("error", "Error: tool py_wait did not finish before the call's deadline")
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # the deadline's cancel was taken back

    for flag in ("cancelled", "cut"):
        entered.clear()
        call = _Call("k", "py_wait")
        run = asyncio.ensure_future(x._run(s, ctx("sleep"), call, None))
        await entered.wait()
        setattr(call, flag, True)
        call.task.cancel()
        res = await run
        assert (res.state, res.output[0].text) == ("interrupted", ev.INTERRUPTED_TEXT), flag
        assert call.task is None

    entered.clear()
    run = asyncio.ensure_future(x._run(s, ctx("sleep"), _Call("k", "py_wait"), None))
    await entered.wait()
    run.cancel()  # the serving task itself, as a loop's shutdown does
    res = await run
    assert (res.state, res.output[0].text) == ("interrupted", ev.INTERRUPTED_TEXT)

    res = await asyncio.ensure_future(x._run(s, ctx("raise"), _Call("k", "py_wait"), None))
    assert (res.state, res.output[0].text) == ("interrupted", ev.INTERRUPTED_TEXT)


READY_WORKER = """
import asyncio, sys, toolbus

@toolbus.tool(name="py_ready", read_only=True)
async def ready(x: int) -> str:
    return str(x)

asyncio.run(toolbus.serve(ready, url=sys.argv[1], id="ready-1"))
"""


async def test_serve_says_when_ready(bins, tmpdir_session):
    """toolbus.serve says on stderr, once registered, which worker serves which tools where, and SIGTERM drains it."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, start_router, stop_router, wait_ready

    r = start_router(tmpdir_session, bins)
    proc = None
    try:
        await wait_ready(r.url, r.proc, r.log)
        proc = subprocess.Popen([sys.executable, "-c", READY_WORKER, r.url], stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(ROOT / "python" / "src")})
        assert proc.stderr is not None
        line = (await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)).decode()
        assert line.startswith("toolbus: worker ready-1 serving py_ready on nats://"), line
        c = await toolbus.Client.connect(r.url)
        try:
            rep = await c.call("ready", [{"id": "c1", "name": "py_ready", "input": {"x": 7}}], timeout=30)
            assert rep.results[0].ok
        finally:
            await c.close()
        proc.terminate()
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        stop_router(r)
