"""Parked calls: confirmations, external answers from a Python handler, cancel, request-scoped tools."""

from __future__ import annotations

import asyncio

import toolbus
from conftest import unique
from toolbus import event as ev


async def test_confirm_then_runs(client, worker_factory, session):
    name = unique("py_deploy")
    ran = []

    @toolbus.tool(name=name)  # not read-only: the default mode asks first (6.4)
    async def deploy(env: str) -> str:
        """Deploy."""
        ran.append(env)
        return f"deployed {env}"

    await worker_factory(deploy)
    async with client.events(session) as stream:
        reply = await client.call(session, [{"id": "c1", "name": name, "input": {"env": "prod"}}], reply_id="t1")
        assert reply.results == []
        (p,) = reply.parked
        assert (p.id, p.kind, p.subject, p.input) == ("c1", "confirm", f"toolbus.answer.{name}", {"env": "prod"})
        await client.confirm(name, session, "t1", "c1", True, input_digest=toolbus.input_digest({"env": "prod"}))
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id="t1")
    assert toolbus.Result.from_json(done.data["results"][0]).text == "deployed prod"
    assert ran == ["prod"]
    # Answered once: a second confirmation is refused and changes nothing.
    try:
        await client.confirm(name, session, "t1", "c1", False)
        raise AssertionError("a second confirmation was taken")
    except toolbus.BusError as err:
        assert err.code in ("not_parked", "already_answered")


async def test_deny_with_reason(client, worker_factory, session):
    name = unique("py_rm")

    @toolbus.tool(name=name)
    async def rm(path: str) -> str:
        raise AssertionError("must not run")

    await worker_factory(rm)
    async with client.events(session) as stream:
        await client.call(session, [{"id": "c1", "name": name, "input": {"path": "/"}}], reply_id="t1")
        await client.confirm(name, session, "t1", "c1", False, reason="not the root")
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id="t1")
    r = toolbus.Result.from_json(done.data["results"][0])
    assert r.state == "denied" and f'The execution of tool "{name}" is denied by user!' in r.text and "Reason: not the root" in r.text


async def test_python_handler_answers_external_tool(client, worker_factory, session):
    name = unique("py_pick")
    w = await toolbus.Worker.connect(client.nc.connected_url.geturl(), heartbeat=1.0)
    w.handle({"name": name, "description": "Ask a person to pick a file.", "external": True,
              "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}})
    await w.start()
    try:
        async with client.requests(name) as reqs:

            async def handler() -> None:
                e = await reqs.next(timeout=30)
                req = toolbus.ExternalRequest.from_event(e)
                assert req.context == {"tenant": "acme"} and req.call.input == {"q": "which?"}
                await client.answer(req.tool, req.session, req.reply_id, req.call.id, f"picked for {req.user}")

            h = asyncio.create_task(handler())
            async with client.events(session) as stream:
                # External tools need a confirmation too unless allowed: allow through the session's mode.
                await client.admin("session.mode", session, {"mode": "bypass"})
                reply = await client.call(session, [{"id": "c1", "name": name, "input": {"q": "which?"}}], reply_id="t1",
                                          user="bob", context={"tenant": "acme"})
                assert [p.kind for p in reply.parked] + [r.state for r in reply.results] in (["external"], ["success"])
                await asyncio.wait_for(h, 30)
                if reply.parked:
                    done = await stream.until(ev.TYPE_BATCH_DONE, reply_id="t1")
                    results = [toolbus.Result.from_json(r) for r in done.data["results"]]
                else:
                    results = reply.results
        assert results[0].text == "picked for bob"
    finally:
        await w.drain()


async def test_request_scoped_tool_answered_by_agent(client, session):
    req = {"external_tools": [{"name": "ask_user", "description": "Ask.", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]}
    tl = await client.tools(session, "anthropic", request=req)
    assert "ask_user" in tl.names
    async with client.events(session) as stream:
        reply = await client.call(session, [{"id": "c1", "name": "ask_user", "input": {"q": "?"}}], request=req, reply_id="t1")
        (p,) = reply.parked
        assert p.kind == "external"
        await client.answer_parked(p, session, "t1", [toolbus.Block.text_block("yes")])
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id="t1")
    assert done.data["results"][0]["output"] == [{"type": "text", "text": "yes"}]


async def test_cancel_parked(client, worker_factory, session):
    name = unique("py_wait")

    @toolbus.tool(name=name)
    async def wait(x: int) -> str:
        return "ran"

    await worker_factory(wait)
    async with client.events(session) as stream:
        reply = await client.call(session, [{"id": "c1", "name": name, "input": {"x": 1}}], reply_id="t1")
        assert reply.parked[0].kind == "confirm"
        await client.cancel(session, "t1")
        done = await stream.until(ev.TYPE_BATCH_DONE, reply_id="t1")
    r = toolbus.Result.from_json(done.data["results"][0])
    assert r.state == "interrupted" and r.text == ev.INTERRUPTED_TEXT
