"""Agent and worker on a real router: call/reply, events, progress, tools in every format."""

from __future__ import annotations

import asyncio

import nats
import pytest

import toolbus
from conftest import unique
from test_same_wire import exec_event
from toolbus import event as ev


async def test_call_python_worker(client, worker_factory, session):
    name = unique("py_mul")

    @toolbus.tool(name=name, read_only=True)
    async def mul(a: int, b: int) -> str:
        """Multiply two integers."""
        return str(a * b)

    await worker_factory(mul)
    reply = await client.call(session, [{"id": "c1", "name": name, "input": {"a": 6, "b": 7}}])
    assert reply.parked == []
    assert [(r.id, r.state, r.text) for r in reply.results] == [("c1", "success", "42")]


async def test_call_go_builtin_echo_and_string_input(client, session):
    reply = await client.call(session, [toolbus.Call("c1", "echo", '{"text": "hi"}')])
    r = reply.result("c1")
    assert r is not None and r.ok, r
    assert "hi" in r.text


async def test_events_and_progress(client, worker_factory, session):
    name = unique("py_steps")

    @toolbus.tool(name=name, read_only=True)
    async def steps(n: int, ctx: toolbus.ToolContext) -> str:
        """Report n steps of progress."""
        for i in range(n):
            await ctx.progress(f"step {i + 1}")
        return f"done {ctx.session} {ctx.user}"

    await worker_factory(steps)
    async with client.events(session) as stream:
        reply_id = await client.publish(session, [{"id": "c1", "name": name, "input": {"n": 3}}], user="alice", events="calls")
        progress = []
        while len(progress) < 3:
            e = await stream.until(ev.TYPE_CALL_PROGRESS, reply_id=reply_id, timeout=30)
            progress.append(e)
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id=reply_id, timeout=30)
    assert [p.data["seq"] for p in progress] == [1, 2, 3]
    assert [p.data["output"][0]["text"] for p in progress] == ["step 1", "step 2", "step 3"]
    assert all(p.toolcallid == "c1" and p.subject == "c1" and p.source.startswith("toolbus/router/") for p in progress)  # the router publishes it (1.18)
    res = toolbus.Result.from_json(done.data["results"][0])
    assert res.text == f"done {session} alice"


@pytest.mark.parametrize("fmt", ["toolbus", "openai", "openai-responses", "anthropic", "gemini", "mcp"])
async def test_tools_every_format(client, worker_factory, session, fmt):
    name = unique("py_fmt")

    @toolbus.tool(name=name, read_only=True)
    async def f(city: str, days: int = 1) -> str:
        """Weather for a city.

        Args:
            city: the city's name
            days: how many days
        """
        return city

    await worker_factory(f)
    tl = await client.tools(session, fmt)
    assert name in tl.names and "echo" in tl.names
    entry = next(t for t in tl.tools if (t.get("function") or t).get("name") == name)
    if fmt == "openai":
        schema = entry["function"]["parameters"]
        assert entry["type"] == "function" and entry["function"]["description"] == "Weather for a city."
    elif fmt == "openai-responses":
        schema = entry["parameters"]
        assert entry["type"] == "function" and entry["strict"] is False
    elif fmt == "gemini":
        schema = entry["parametersJsonSchema"]  # JSON Schema, not the OpenAPI subset of "parameters" (protocol 4.1)
    elif fmt == "mcp":
        schema = entry["inputSchema"]
        assert entry["annotations"]["readOnlyHint"] is True
    else:
        schema = entry["input_schema"]
    assert schema["properties"]["city"] == {"type": "string", "description": "the city's name"}
    assert schema["required"] == ["city"]
    if fmt == "toolbus":
        assert entry["read_only"] is True and entry["timeout_ms"] == 300000
    assert tl.groups[0].name == "basic"


async def test_turn_openai_and_anthropic(client, session):
    msg = {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                 "function": {"name": "echo", "arguments": '{"text": "x1"}'}}]}
    out = await client.turn(session, "openai", msg)
    assert out.messages[0]["role"] == "tool" and out.messages[0]["tool_call_id"] == "call_1"
    assert "x1" in out.messages[0]["content"]
    amsg = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "y"}}]}
    out = await client.turn(session, "anthropic", amsg)
    assert out.messages[0]["content"][0]["tool_use_id"] == "toolu_1"
    gmsg = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "echo", "args": {"text": "g"}}}]}}]}
    out = await client.turn(session, "gemini", gmsg)
    fr = out.messages[0]["parts"][0]["functionResponse"]
    assert "id" not in fr and fr["name"] == "echo" and "g" in fr["response"]["output"]
    rmsg = {"output": [{"type": "function_call", "call_id": "fc_1", "name": "echo", "arguments": '{"text":"r"}'}]}
    out = await client.turn(session, "openai-responses", rmsg)
    assert out.messages[0]["call_id"] == "fc_1"


async def test_concurrency_bound(client, worker_factory, session):
    name = unique("py_slow")
    running = 0
    peak = 0
    both = asyncio.Event()

    @toolbus.tool(name=name, read_only=True)
    async def slow(i: int) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            both.set()
        try:
            await asyncio.wait_for(both.wait(), 60)  # the first two hold until both run: no timing involved
            return str(i)
        finally:
            running -= 1

    await worker_factory(slow, max_concurrent=2)
    reply = await client.call(session, [{"id": f"c{i}", "name": name, "input": {"i": i}} for i in range(6)])
    assert sorted(r.text for r in reply.results) == [str(i) for i in range(6)]
    assert peak == 2


async def test_replay_stored_events(client, session):
    r1 = await client.call(session, [{"id": "c1", "name": "echo", "input": {"text": "first"}}], reply_id="t1")
    assert r1.results[0].ok
    async with client.replay(session) as stored:
        done = await stored.until(ev.TYPE_BATCH_DONE, reply_id="t1", timeout=30)
        assert "first" in toolbus.Result.from_json(done.data["results"][0]).text
        # The stream goes on with events stored after it opened.
        await client.call(session, [{"id": "c1", "name": "echo", "input": {"text": "second"}}], reply_id="t2")
        done = await stored.until(ev.TYPE_BATCH_DONE, reply_id="t2", timeout=30)
        assert "second" in toolbus.Result.from_json(done.data["results"][0]).text


async def test_progress_where_the_exec_says(router, worker_factory):
    """Protocol 1.18: a worker sends a call's progress to the exec's reply subject + ".progress" when the exec
    says ``progress_reply`` (the router publishes it), and on the session's events otherwise (a router of 1.17),
    as before; the result goes to the reply subject either way."""
    name = unique("py_progress_to")

    @toolbus.tool(name=name, read_only=True)
    async def step(ctx: toolbus.ToolContext) -> str:
        """One step of progress."""
        await ctx.progress("step")
        return "done"

    await worker_factory(step)
    nc = await nats.connect(router.url)
    try:
        for says in (True, False):
            got: asyncio.Queue = asyncio.Queue()
            inbox = nc.new_inbox()
            subs = [await nc.subscribe(s, cb=got.put) for s in (inbox, inbox + ".progress", "toolbus.events.wire")]
            e = exec_event(name, f"c-{says}")
            e.data["call"]["input"] = {}
            if says:
                e.data["progress_reply"] = True
            body, headers = ev.encode_structured(e)
            await nc.publish(f"toolbus.exec.{name}", body, reply=inbox, headers=headers)
            first = await asyncio.wait_for(got.get(), 30)
            result = await asyncio.wait_for(got.get(), 30)
            assert first.subject == (inbox + ".progress" if says else "toolbus.events.wire"), first.subject
            p = ev.decode(first.data, first.headers)
            assert p.type == ev.TYPE_CALL_PROGRESS and p.data == {"seq": 1, "output": [{"type": "text", "text": "step"}]}, p
            assert result.subject == inbox and ev.decode(result.data, result.headers).type == ev.TYPE_EXEC_RESULT
            for s in subs:
                await s.unsubscribe()
    finally:
        await nc.close()


async def test_progress_over_the_cap(router, worker_factory):
    """Protocol 1.19: a progress message is at most 64 KiB (``MAX_PROGRESS``): a large block is stored and sent
    by reference, and a progress still over the cap (here by the exec's tracestate of 70 KiB, which it carries)
    raises in the tool, nothing sent."""
    name = unique("py_progress_cap")

    @toolbus.tool(name=name, read_only=True)
    async def big(ctx: toolbus.ToolContext) -> str:
        """One large progress."""
        try:
            await ctx.progress("x" * (100 << 10))
        except ValueError as err:
            return str(err)
        return "sent"

    await worker_factory(big)
    nc = await nats.connect(router.url)
    try:
        for tracestate in ("", "k=" + "v" * (70 << 10)):
            got: asyncio.Queue = asyncio.Queue()
            inbox = nc.new_inbox()
            subs = [await nc.subscribe(s, cb=got.put) for s in (inbox, inbox + ".progress")]
            e = exec_event(name, "c1")
            e.data["call"]["input"], e.data["progress_reply"], e.tracestate = {}, True, tracestate
            body, headers = ev.encode_structured(e)
            await nc.publish(f"toolbus.exec.{name}", body, reply=inbox, headers=headers)
            first = await asyncio.wait_for(got.get(), 30)
            if tracestate:
                text = ev.decode(first.data, first.headers).data["output"][0]["text"]
                assert first.subject == inbox and f"more than the {ev.MAX_PROGRESS}" in text, (first.subject, text)
                assert got.empty()
            else:
                p = ev.decode(first.data, first.headers)
                assert first.subject == inbox + ".progress" and len(first.data) <= ev.MAX_PROGRESS, first.subject
                assert any(b["type"] != "text" for b in p.data["output"]), p.data  # the text by reference
                result = await asyncio.wait_for(got.get(), 30)
                assert ev.decode(result.data, result.headers).data["output"][0]["text"] == "sent"
            for s in subs:
                await s.unsubscribe()
    finally:
        await nc.close()
