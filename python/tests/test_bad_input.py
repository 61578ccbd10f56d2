"""Bad input from every direction gets a clear error and changes nothing."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import toolbus
from conftest import start_router, stop_router, unique, wait_ready
from toolbus import event as ev


async def test_tool_raises(client, worker_factory, session):
    name = unique("py_boom")

    @toolbus.tool(name=name, read_only=True)
    async def boom(x: int) -> str:
        raise RuntimeError(f"boom {x}")

    @toolbus.tool(name=name + "_te", read_only=True)
    def tool_error(x: int) -> str:  # a sync tool runs in a thread
        raise toolbus.ToolError(f"exactly this {x}")

    await worker_factory(boom, tool_error)
    reply = await client.call(session, [{"id": "c1", "name": name, "input": {"x": 1}},
                                        {"id": "c2", "name": name + "_te", "input": {"x": 2}}])
    r1, r2 = reply.results
    assert (r1.state, r1.error.code, r1.text) == ("error", "tool_error", "Error: boom 1")
    assert (r2.state, r2.error.code, r2.text) == ("error", "tool_error", "exactly this 2")


async def test_worker_returns_garbage(client, worker_factory, session, router):
    name = unique("py_garbage")

    @toolbus.tool(name=name, read_only=True)
    async def garbage(kind: str) -> object:
        if kind == "object":
            return object()
        return [{"type": "data", "data": "AAAA"}]  # a data block without media_type

    await worker_factory(garbage)
    reply = await client.call(session, [{"id": "c1", "name": name, "input": {"kind": "object"}},
                                        {"id": "c2", "name": name, "input": {"kind": "block"}}])
    r1, r2 = reply.results
    assert r1.error.code == "tool_error" and "returned an output that cannot be sent" in r1.text
    assert r2.error.code == "tool_error" and "media_type" in r2.text or "invalid output block" in r2.text, r2

    # A raw responder (not the SDK) answering garbage bytes: the router reports it, the agent gets a result.
    raw = unique("raw_garbage")
    nc = await nats.connect(router.url)
    try:
        async def on(m):
            await nc.publish(m.reply, b"\x00 not a cloudevent")

        await nc.subscribe(f"toolbus.exec.{raw}", queue=f"toolbus-exec-{raw}", cb=on)
        w = await toolbus.Worker.connect(router.url, heartbeat=1.0)
        w.handle({"name": raw, "description": "raw", "input_schema": {"type": "object"}, "read_only": True},
                 lambda ctx: asyncio.sleep(3600))
        # Register the definition only; unsubscribe the SDK's own handler so the raw one answers.
        await w.start()
        for s in w._tools.values():
            await s.sub.unsubscribe()
            s.sub = None
        await toolbus._rpc.synced(nc)
        reply = await client.call(session, [{"id": "c1", "name": raw, "input": {}}])
        r = reply.results[0]
        assert r.state == "error" and r.error.code in ("internal", "tool_error"), r
        await w.drain()
    finally:
        await nc.close()


async def test_malformed_batches(client, router, session):
    # Refused locally before anything is sent: strict request, bad ids.
    with pytest.raises(toolbus.ProtocolError, match='request: unknown member "tools"'):
        await client.call(session, [{"id": "c1", "name": "echo"}], request={"tools": []})
    with pytest.raises(toolbus.ProtocolError, match="session id"):
        await client.call("bad.session", [{"id": "c1", "name": "echo"}])
    with pytest.raises(toolbus.ProtocolError, match="member \"id\" must be a string"):
        await client.call(session, [{"id": 1, "name": "echo"}])
    # Refused by the router, and nothing runs.
    with pytest.raises(toolbus.BusError) as ei:
        await client.call(session, [{"id": f"c{i}", "name": "echo", "input": {"text": "x"}} for i in range(65)])
    assert ei.value.code == "bad_request"
    with pytest.raises(toolbus.BusError) as ei:
        await client.call(session, [{"id": "c1", "name": "echo"}, {"id": "c1", "name": "echo"}])
    assert ei.value.code == "bad_request" and "c1" in ei.value.message
    with pytest.raises(toolbus.BusError) as ei:
        await client.call(session, [{"id": "c1", "name": "echo"}], events="each")
    assert ei.value.code == "bad_request" and 'events "each"' in ei.value.message
    # Past the server's max_payload: refused by the client before anything is sent.
    with pytest.raises(toolbus.BusError, match="max_payload") as ei:
        await client.call(session, [{"id": "c1", "name": "echo", "input": {"text": "x" * (client.nc.max_payload + 1)}}])
    assert ei.value.code == "bad_request"
    # Raw bytes that are not a CloudEvent, and a wrong type, straight on the subject.
    for body in (b"{not json", json.dumps({"specversion": "1.0", "id": "x", "source": "s", "type": "io.toolbus.answer"}).encode()):
        msg = await client.nc.request(f"toolbus.call.{session}", body, timeout=10)
        e = ev.decode(msg.data, msg.headers)
        assert e.type == ev.TYPE_ERROR and e.data["code"] == "bad_event", e
    # Invalid input for a known tool is that call's result, not a batch error.
    reply = await client.call(session, [{"id": "c1", "name": "echo", "input": {"text": 5}}])
    assert reply.results[0].error.code == "invalid_input"
    # An unknown tool likewise.
    reply = await client.call(session, [{"id": "c1", "name": "no_such_tool_here"}])
    assert reply.results[0].error.code == "unknown_tool"


async def test_malformed_exec_to_python_worker(client, worker_factory, router):
    name = unique("py_strict")
    ran = []

    @toolbus.tool(name=name, read_only=True)
    async def strict(x: int) -> str:
        ran.append(x)
        return "ran"

    await worker_factory(strict)
    nc = client.nc
    cases = [
        (b"garbage", {}),
        (json.dumps({"specversion": "1.0", "id": "1", "source": "s", "type": "io.toolbus.exec", "sessionid": "s",
                     "replyid": "r", "toolcallid": "c", "data": {"call": {"id": "c", "name": "other", "input": {}}}}).encode(), {}),
        (json.dumps({"specversion": "1.0", "id": "1", "source": "s", "type": "io.toolbus.exec", "sessionid": "bad.id",
                     "data": {}}).encode(), {}),
        (b'{"call": {"id": "c", "name": "x"}}', {"ce-specversion": "1.0", "ce-id": "1", "Ce-Id": "2", "ce-source": "s",
                                                  "ce-type": "io.toolbus.exec"}),
        (b'{"call": {"id": "c"}}', {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "%ZZ", "ce-type": "io.toolbus.exec"}),
    ]
    for body, headers in cases:
        msg = await nc.request(f"toolbus.exec.{name}", body, timeout=10, headers=headers or None)
        e = ev.decode(msg.data, msg.headers)
        assert e.type == ev.TYPE_ERROR and e.data["code"] == "bad_event", (body, e)
        assert e.source.startswith("toolbus/worker/")
    assert ran == []


def test_schema_cannot_be_derived():
    class Opaque:
        pass

    with pytest.raises(toolbus.SchemaError, match="parameter 'x' has no type hint"):
        @toolbus.tool
        def f(x):  # type: ignore[no-untyped-def]
            return x

    with pytest.raises(toolbus.SchemaError, match="cannot derive a JSON schema from type"):
        @toolbus.tool
        def g(x: Opaque) -> str:
            return ""

    with pytest.raises(toolbus.SchemaError, match="keys must be str"):
        @toolbus.tool
        def h(x: dict[int, str]) -> str:
            return ""

    with pytest.raises(toolbus.SchemaError, match="must match"):
        @toolbus.tool(name="bad name")
        def i(x: int) -> str:
            return ""


async def test_rejected_registration_is_loud_and_not_served(client, router, session, caplog):
    name = unique("py_rejected")
    w = await toolbus.Worker.connect(router.url, heartbeat=1.0)
    # A schema that is not an object schema: the router rejects it (7.1).
    w.handle({"name": name, "description": "bad", "input_schema": {"type": "string"}}, lambda ctx: asyncio.sleep(0))
    try:
        with pytest.raises(toolbus.RegistrationError) as ei:
            await w.start()
        assert ei.value.rejected[0].name == name
        assert any("REJECTED" in r.message for r in caplog.records)
        assert w._tools[name].sub is None
        reply = await client.call(session, [{"id": "c1", "name": name, "input": {}}])
        assert reply.results[0].error.code == "unknown_tool"
    finally:
        await w.drain()
    # A definition with an unknown member is refused before anything is sent.
    with pytest.raises(toolbus.ProtocolError, match='unknown member "schema"'):
        toolbus.Worker(client.nc).handle({"name": "x", "schema": {}, "input_schema": {"type": "object"}}, lambda c: None)


async def test_nats_goes_away_mid_call(bins, tmpdir_session):
    r = start_router(tmpdir_session, bins, "--heartbeat", "1s")
    try:
        await wait_ready(r.url, r.proc, r.log)
        started = asyncio.Event()

        @toolbus.tool(name="py_hang", read_only=True)
        async def hang() -> str:
            started.set()
            await asyncio.sleep(3600)
            return ""

        w = await toolbus.Worker.connect(r.url, heartbeat=1.0, nats_options={"max_reconnect_attempts": 2, "reconnect_time_wait": 0.2})
        w.add(hang)
        await w.start()
        c = await toolbus.Client.connect(r.url, max_reconnect_attempts=1, reconnect_time_wait=0.2)
        call = asyncio.create_task(c.call("s1", [{"id": "c1", "name": "py_hang"}], timeout=30))
        await asyncio.wait_for(started.wait(), 20)
        r.proc.kill()  # the router and its embedded NATS server vanish, mid-call
        r.proc.wait(20)
        with pytest.raises(toolbus.ToolbusError) as ei:
            await asyncio.wait_for(call, 60)
        assert ei.value.code in ("unavailable", "timeout"), ei.value
        assert "connection" in str(ei.value) or "no reply" in str(ei.value)
        # Both sides stay usable objects: draining and closing do not hang or raise.
        await asyncio.wait_for(w.drain(timeout=1), 30)
        await asyncio.wait_for(c.close(), 30)
    finally:
        stop_router(r)


async def test_fetch_refuses_forged_bytes(router):
    """A responder on P.outputs (here under a prefix no router serves) that sends other bytes is caught by the digest."""
    import base64
    import hashlib

    nc = await nats.connect(router.url)
    real = b"the recorded output"
    digest = hashlib.sha256(real).hexdigest()
    url = f"nats-object://evil_outputs/s1.r.c.{'0' * 32}.0#sha256={digest}"
    mode = {"data": b"forged output!!!!!!"}

    async def on(m):
        data = mode["data"]
        out = ev.Event(ev.TYPE_OUTPUT_CHUNK, "toolbus/router/evil", {"url": url, "media_type": "text/plain", "size": len(data),
                                                                    "digest": mode.get("digest", digest), "offset": 0,
                                                                    "data": base64.b64encode(data).decode()})
        body, headers = ev.encode_structured(out)
        await nc.publish(m.reply, body, headers=headers)

    await nc.subscribe("evil.outputs.s1", cb=on)
    c = toolbus.Client(nc, prefix="evil")
    try:
        with pytest.raises(toolbus.ToolbusError, match="do not hash to the url's digest"):
            await c.fetch(url)
        mode["digest"] = "f" * 64
        with pytest.raises(toolbus.ToolbusError, match="changed while it was read"):
            await c.fetch(url)
        mode.pop("digest")
        mode["data"] = real
        assert await c.fetch(url) == real
        with pytest.raises(toolbus.ProtocolError, match="has no #sha256"):
            await c.fetch(url.split("#")[0])
    finally:
        await nc.close()
