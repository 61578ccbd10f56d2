"""Router-made consumers read through the router (protocol 1.4, 3.4 and 6.2): replay and the handoff.

Each end-to-end test runs twice: on the open router of conftest and on a router started with
``--secure DIR``, logged in with the generated least-privilege users (agent, handler, worker,
operator; docs/security.md), which have no JetStream API at all.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import nats
import pytest
import pytest_asyncio

import toolbus
from conftest import Router, start_router, stop_router, unique, wait_ready
from toolbus import _rpc, follow
from toolbus import event as ev

SECURE_TOOL = "py_pick"  # the secure deployment's handler "picker" may follow and answer only this tool


# ---- no router ----

@pytest.mark.parametrize("reply, want", [
    ("$JS.ACK.TOOLBUS_EVENTS.replay-x.1.42.7.1733220000000000000.0", 42),
    ("$JS.ACK.hub.ACCHASH.TOOLBUS_EVENTS.replay-x.1.43.7.1733220000000000000.0.rnd", 43),
    ("_INBOX.agent.x", None),
    ("$JS.ACK.TOOLBUS_EVENTS.replay-x.1.x.7.1.0", None),
    ("$JS.ACK.TOOLBUS_EVENTS.replay-x.1.-4.7.1.0", None),
    ("$JS.ACK.TOOLBUS_EVENTS.replay-x.1.\u00b2.7.1.0", None),
    ("$JS.ACK.TOOLBUS_EVENTS.replay-x.1.99999999999999999999.7.1.0", None),
    ("$JS.ACK.short", None),
    ("", None),
    (None, None),
])
def test_stream_seq(reply, want):
    assert follow.stream_seq(reply) == want


def test_bad_arguments_refused_before_anything_is_sent():
    c = toolbus.Client(nc=None)
    for bad in (-1, 1.5, "3", True, 1 << 64):
        with pytest.raises(toolbus.ProtocolError):
            c.replay("s1", start_seq=bad)
    for tool, kind in (("a.b", "external"), ("t", "answer"), ("*", "confirm"), ("t", "")):
        with pytest.raises(toolbus.ProtocolError):
            c.follow_handoff(tool, kind)
    with pytest.raises(toolbus.ProtocolError):
        c.replay("bad.session")


# ---- deployments ----

def read_env(path: Path) -> dict[str, str]:
    """A <role>.env file's variables: `export NAME=value` lines, values quoted for the shells (or bare NAME=value)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        words = shlex.split(line)
        if words[:1] == ["export"]:
            words = words[1:]
        for w in words:
            k, sep, v = w.partition("=")
            if sep:
                out[k] = v
    return out


@dataclass
class Deployment:
    name: str
    url: str
    secure_dir: str = ""
    tool: str = ""
    opened: list[Any] = field(default_factory=list)

    def options(self, role: str, errors: list[Exception] | None = None) -> dict[str, Any]:
        """nats.connect options logging in as role (the generated user, on the secure deployment)."""
        opts: dict[str, Any] = {"name": f"pytest-{role}"}
        if self.secure_dir:
            env = read_env(Path(self.secure_dir) / f"{role}.env")
            opts.update(nkeys_seed=env["NATS_NKEY"], inbox_prefix=env["NATS_INBOX_PREFIX"])

        async def on_error(err: Exception) -> None:
            if errors is not None:
                errors.append(err)

        opts["error_cb"] = on_error
        return opts

    async def login(self, role: str, errors: list[Exception] | None = None) -> toolbus.Client:
        c = await toolbus.Client.connect(self.url, source=f"pytest/{role}", **self.options(role, errors))
        self.opened.append(c)
        return c

    def external_tool(self) -> str:
        return self.tool or unique("py_pick")


@pytest_asyncio.fixture(scope="module")
async def secure_router(bins: dict[str, Path], tmpdir_session: str) -> AsyncIterator[tuple[Router, str]]:
    """A router started with --secure DIR, DIR generated first with a session agent and a handler (docs/security.md)."""
    # A directory of its own: the fixture is module-scoped and imported by other modules
    # (agentscope/test_agentscope_attack40.py), and `security config` refuses a directory it wrote.
    sdir = tempfile.mkdtemp(prefix="secure-", dir=tmpdir_session)
    subprocess.run([str(bins["toolbus"]), "security", "config", "--out", sdir, "--session", "s1",
                    "--handler", f"picker={SECURE_TOOL}"], check=True, capture_output=True, timeout=60)
    r = start_router(tmpdir_session, bins, "--secure", sdir, "--heartbeat", "1s")
    try:
        d = Deployment("secure", r.url, sdir)
        await wait_ready(r.url, r.proc, r.log, **d.options("agent"))
        yield r, sdir
    finally:
        stop_router(r)


@pytest.fixture(params=["open", "secure"])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    if request.param == "open":
        return Deployment("open", request.getfixturevalue("router").url)
    r, sdir = request.getfixturevalue("secure_router")
    return Deployment("secure", r.url, sdir, tool=SECURE_TOOL)


@pytest_asyncio.fixture
async def dep(deployment: Deployment) -> AsyncIterator[Deployment]:
    """The deployment; the clients a test logged in with are closed after it."""
    try:
        yield deployment
    finally:
        for c in deployment.opened:
            await c.close()


async def echo(c: toolbus.Client, session: str, reply_id: str, text: str) -> None:
    r = await c.call(session, [{"id": "c1", "name": "echo", "input": {"text": text}}], reply_id=reply_id)
    assert r.results[0].ok, r.results[0]


# ---- replay ----

async def test_replay_from_start_seq(dep, session):
    a = await dep.login("agent")
    for i in range(1, 4):
        await echo(a, session, f"t{i}", f"text {i}")
    seqs = {}
    async with a.replay(session) as stored:
        for i in range(1, 4):
            await stored.until(ev.TYPE_BATCH_DONE, reply_id=f"t{i}")
            seqs[i] = stored.last_seq
    assert 0 < seqs[1] < seqs[2] < seqs[3]
    # From t2's sequence: t1 is not seen again, t2 comes first.
    async with a.replay(session, start_seq=seqs[2]) as stored:
        e = await stored.next()
        assert (e.type, e.replyid, stored.last_seq) == (ev.TYPE_BATCH_DONE, "t2", seqs[2])
        # And it goes on with events stored after it opened.
        await echo(a, session, "t4", "text 4")
        e = await stored.next()
        assert (e.replyid, stored.last_seq) == ("t3", seqs[3])
        e = await stored.until(ev.TYPE_BATCH_DONE, reply_id="t4")
        assert "text 4" in toolbus.Result.from_json(e.data["results"][0]).text


async def test_replay_recovers_a_lost_consumer(dep, session):
    a = await dep.login("agent")
    peer = await dep.login("agent")  # another connection of the same agent
    await echo(a, session, "t1", "one")
    async with a.replay(session) as stored:
        await stored.until(ev.TYPE_BATCH_DONE, reply_id="t1")
        lost = stored.consumer
        # The consumer goes away under the follower (as on a node's loss): a peer stops it through the router.
        stop = ev.Event(ev.TYPE_CONSUMER_STOP, "pytest", {"consumer": lost}, sessionid=session)
        body, headers = ev.encode_structured(stop)
        await peer.nc.publish(peer.subjects.replay(session), body, headers=headers)
        await toolbus._rpc.synced(peer.nc)
        # Its pull ends with a 409 (or the next one is refused): the follower asks a router again.
        await bounded(lambda: stored.consumer not in ("", lost), 60)
        await echo(a, session, "t2", "two")
        await echo(a, session, "t3", "three")
        seen = []
        while "t3" not in seen:
            e = await stored.next(timeout=60)
            if e.type == ev.TYPE_BATCH_DONE:
                seen.append(e.replyid)
        # Asked again from the next sequence: nothing missed, nothing repeated.
        assert seen == ["t2", "t3"]


async def test_follower_takes_silence_and_refusal_for_a_lost_consumer(client, monkeypatch):
    """On a prefix no router serves, a scripted peer answers for one: the first consumer's pull gets
    nothing (no closing status within the wait + grace), the second's is refused; the follower asks
    again each time from the sequence it wants next, and stops the last one when closed. (Stored
    messages come from JetStream itself, so the real router's tests show the sequence moving on.)"""
    monkeypatch.setattr(follow, "WAIT", 0.2)
    monkeypatch.setattr(follow, "GRACE", 0.5)
    prefix = unique("pyfake").lower()
    c = toolbus.Client(client.nc, prefix=prefix, source="pytest")
    asked: list[Any] = []
    stopped: list[str] = []
    names = iter(["replay-a", "replay-b", "replay-c"])

    async def serve(m: Any) -> None:
        e = ev.decode(m.data, m.headers)
        if e.type == ev.TYPE_REPLAY:
            asked.append((e.data or {}).get("start_seq", 0))
            name = next(names)
            if name == "replay-c":
                monkeypatch.setattr(follow, "GRACE", 120.0)  # this one is kept: its pull waits
            ready = ev.Event(ev.TYPE_REPLAY_READY, "fake", {"stream": "X", "consumer": name, "idle": "30s"}, sessionid="s")
            await client.nc.publish(m.reply, ev.encode_structured(ready)[0], headers=ev.encode_structured(ready)[1])
        elif e.type == ev.TYPE_CONSUMER_NEXT and e.data["consumer"] == "replay-a":
            pass  # silence: no message, no closing status
        elif e.type == ev.TYPE_CONSUMER_NEXT and e.data["consumer"] == "replay-b":
            refusal = ev.Event(ev.TYPE_ERROR, "fake", {"code": "bad_request", "message": "no such consumer"})
            body, headers = ev.encode_structured(refusal)
            await client.nc.publish(m.reply, body, headers=headers)
        elif e.type == ev.TYPE_CONSUMER_STOP:
            stopped.append(e.data["consumer"])

    sub = await client.nc.subscribe(c.subjects.replay("s"), cb=serve)
    try:
        stream = c.replay("s", start_seq=8)
        async with stream:
            await bounded(lambda: stream.consumer == "replay-c", 30)
            assert asked == [8, 8, 8]
        await bounded(lambda: stopped == ["replay-c"], 30)  # the stop comes back from the server to the scripted peer
        with pytest.raises(StopAsyncIteration):
            await stream.next()
    finally:
        await sub.unsubscribe()


async def test_follower_pulls_again_when_a_pull_is_lost(router, client, session):
    """Protocol 1.9: a pull lost on its way (a relayed pull nobody receives answers no one) costs about
    QUIET seconds, not WAIT + GRACE. A hop between a client of prefix "pyhop" and the router drops the
    first io.toolbus.consumer.next on each subject; the follower, whose router said "heartbeat": true,
    hears no heartbeat within QUIET, pulls again on the same consumer and gets the stored event."""
    prefix = unique("pyhop").lower()
    dropped: dict[str, int] = {}
    asked: list[dict[str, Any]] = []

    async def forward(m: Any) -> None:
        e = ev.decode(m.data, m.headers)
        if e.type == ev.TYPE_CONSUMER_NEXT:
            asked.append(e.data)
            if not dropped.get(m.subject):
                dropped[m.subject] = 1
                return
        await client.nc.publish("toolbus." + m.subject[len(prefix) + 1:], m.data, reply=m.reply, headers=m.headers)

    subs = [await client.nc.subscribe(f"{prefix}.{verb}.>", cb=forward) for verb in ("replay", "handoff")]
    try:
        await toolbus._rpc.synced(client.nc)
        await echo(client, session, "t1", "stored")
        hop = toolbus.Client(client.nc, prefix=prefix, source="pytest")
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with hop.replay(session) as stored:
            name = stored.consumer
            e = await stored.until(ev.TYPE_BATCH_DONE, reply_id="t1", timeout=follow.WAIT + follow.GRACE - 1)
            took = loop.time() - start
            assert stored.consumer == name  # pulled again on the same consumer, not a new one
        assert dropped == {hop.subjects.replay(session): 1}
        assert follow.QUIET <= took < follow.WAIT + follow.GRACE - 1, took
        assert asked[0]["heartbeat_ms"] == int(follow.BEAT * 1000) and asked[0]["expires_ms"] == int(follow.WAIT * 1000)
        assert e.sessionid == session
    finally:
        for sub in subs:
            await sub.unsubscribe()


async def test_idle_follower_keeps_its_consumer(router, client, session, monkeypatch):
    """Heartbeats reach the Python follower: an idle replay (nothing new stored) keeps its consumer, pulling
    again only when each pull's wait ends (a 408), never after QUIET. A pass-through hop notes each pull."""
    monkeypatch.setattr(follow, "WAIT", 2.0)
    monkeypatch.setattr(follow, "BEAT", 0.5)
    monkeypatch.setattr(follow, "QUIET", 1.0)
    prefix = unique("pyidle").lower()
    loop = asyncio.get_running_loop()
    pulls: list[tuple[float, str]] = []

    async def forward(m: Any) -> None:
        e = ev.decode(m.data, m.headers)
        if e.type == ev.TYPE_CONSUMER_NEXT:
            pulls.append((loop.time(), e.data["consumer"]))
        await client.nc.publish("toolbus." + m.subject[len(prefix) + 1:], m.data, reply=m.reply, headers=m.headers)

    sub = await client.nc.subscribe(f"{prefix}.replay.>", cb=forward)
    try:
        await toolbus._rpc.synced(client.nc)
        await echo(client, session, "t1", "stored")
        hop = toolbus.Client(client.nc, prefix=prefix, source="pytest")
        async with hop.replay(session) as stored:
            await stored.until(ev.TYPE_BATCH_DONE, reply_id="t1")
            await bounded(lambda: len(pulls) >= 4, 30)
        names = {name for _, name in pulls}
        gaps = [b[0] - a[0] for a, b in zip(pulls[1:], pulls[2:])]  # between idle pulls: each waited WAIT
        assert len(names) == 1, pulls
        assert all(g >= 1.5 for g in gaps), gaps
    finally:
        await sub.unsubscribe()


async def bounded(cond: Any, within: float) -> None:
    """Bounded polling for a condition the test cannot be told about."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not cond():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.05)


# ---- the handoff ----

async def test_handler_follows_the_handoff(dep, session):
    tool = dep.external_tool()
    w = await toolbus.Worker.connect(dep.url, heartbeat=1.0, nats_options=dep.options("worker"))
    w.handle({"name": tool, "description": "Ask a person to pick a file.", "external": True,
              "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}})
    await w.start()
    try:
        a = await dep.login("agent")
        op = await dep.login("operator")
        await op.admin("session.mode", session, {"mode": "bypass"})  # external tools ask first otherwise
        # Published while no handler runs.
        r1 = await a.call(session, [{"id": "c1", "name": tool, "input": {"q": "which?"}}], reply_id="t1")
        assert [p.kind for p in r1.parked] == ["external"]
        h = await dep.login("handler-picker")
        async with h.follow_handoff(tool) as reqs:
            req = toolbus.ExternalRequest.from_event(await reqs.until(ev.TYPE_EXTERNAL_REQUEST, reply_id="t1"))
            assert (req.session, req.call.input) == (session, {"q": "which?"})
            await h.answer(req.tool, req.session, req.reply_id, req.call.id, "picked /a")
            # And one published after the handler started.
            r2 = await a.call(session, [{"id": "c1", "name": tool, "input": {"q": "again?"}}], reply_id="t2")
            assert [p.kind for p in r2.parked] == ["external"]
            req = toolbus.ExternalRequest.from_event(await reqs.until(ev.TYPE_EXTERNAL_REQUEST, reply_id="t2"))
            await h.answer(req.tool, req.session, req.reply_id, req.call.id, "picked /b")
        texts: dict[str, str] = {}
        async with a.replay(session) as stored:  # the two batches' ends, in whichever order they were stored
            while len(texts) < 2:
                done = await stored.until(ev.TYPE_BATCH_DONE)
                texts[done.replyid] = toolbus.Result.from_json(done.data["results"][0]).text
        assert texts == {"t1": "picked /a", "t2": "picked /b"}
    finally:
        await w.drain(timeout=2)


async def test_approver_follows_confirmations(dep, session):
    name = unique("py_deploy")
    ran: list[str] = []

    @toolbus.tool(name=name)  # not read-only: the default mode asks first (6.4)
    async def deploy(env: str) -> str:
        """Deploy."""
        ran.append(env)
        return f"deployed {env}"

    w = await toolbus.Worker.connect(dep.url, heartbeat=1.0, nats_options=dep.options("worker"))
    w.add(deploy)
    await w.start()
    try:
        a = await dep.login("agent")
        r = await a.call(session, [{"id": "c1", "name": name, "input": {"env": "prod"}}], reply_id="t1")
        assert [p.kind for p in r.parked] == ["confirm"]  # asked while no approver runs
        ap = await dep.login("approver")
        async with ap.follow_handoff(kind="confirm") as reqs:  # every tool's confirmations
            while True:  # other tests' open confirmations may come first: they are skipped
                req = toolbus.ExternalRequest.from_event(await reqs.until(ev.TYPE_CONFIRM_REQUEST, reply_id="t1"))
                if req.session == session:
                    break
            assert (req.tool, req.session, req.input_digest) == (name, session, toolbus.input_digest({"env": "prod"}))
            async with a.events(session) as live:
                await ap.confirm(req.tool, req.session, req.reply_id, req.call.id, True, input_digest=req.input_digest)
                done = await live.until(ev.TYPE_BATCH_DONE, reply_id="t1")
        assert toolbus.Result.from_json(done.data["results"][0]).text == "deployed prod" and ran == ["prod"]
    finally:
        await w.drain(timeout=2)


# ---- the secure deployment's refusals ----

def violations(errs: list[Exception], op: str, subject_head: str) -> bool:
    """Whether NATS reported a permissions violation for op on a subject starting so (nats-py lower-cases the text)."""
    want = f'permissions violation for {op} to "{subject_head}'.lower()
    return any(want in str(e).lower() for e in errs)


async def test_secure_session_agent_replays_and_a_foreign_consumer_is_refused(secure_router):
    r, sdir = secure_router
    d = Deployment("secure", r.url, sdir, tool=SECURE_TOOL)
    errs: list[Exception] = []
    try:
        s1 = await d.login("session-s1", errs)  # may use only session s1
        await echo(s1, "s1", "k1", "mine")
        async with s1.replay("s1") as stored:
            await stored.until(ev.TYPE_BATCH_DONE, reply_id="k1")
        assert errs == []  # the replay needed no JetStream API and no other subject

        agent = await d.login("agent")  # the shared agent, in another session
        await echo(agent, "py-other", "o1", "theirs")
        handler = await d.login("handler-picker")
        async with agent.replay("py-other") as other:
            await other.until(ev.TYPE_BATCH_DONE, reply_id="o1")
            name = other.consumer
            # Knowing the name grants nothing: named on s1's own subject, or on the handler's, it is refused, nothing relayed.
            for c, subject, sid in ((s1, s1.subjects.replay("s1"), "s1"), (handler, handler.subjects.handoff("external", SECURE_TOOL), "")):
                for typ, data in ((ev.TYPE_CONSUMER_NEXT, {"consumer": name, "batch": 1}), (ev.TYPE_CONSUMER_STOP, {"consumer": name})):
                    with pytest.raises(toolbus.BusError) as refused:
                        await _rpc.request(c.nc, subject, ev.Event(typ, "pytest", data, sessionid=sid), "none", 10)
                    assert refused.value.code == "bad_request"
            # And the JetStream API itself is denied (the 1.3 way).
            await s1.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.TOOLBUS_EVENTS.{name}", b'{"batch":1}', reply=s1.nc.new_inbox())
            await s1.nc.publish(f"$JS.API.CONSUMER.DELETE.TOOLBUS_EVENTS.{name}", b"")
            await toolbus._rpc.synced(s1.nc)
            await bounded(lambda: violations(errs, "Publish", "$JS.API.CONSUMER.MSG.NEXT.")
                          and violations(errs, "Publish", "$JS.API.CONSUMER.DELETE."), 30)
            # The owner's consumer is untouched: it goes on.
            await echo(agent, "py-other", "o2", "still")
            await other.until(ev.TYPE_BATCH_DONE, reply_id="o2")
            assert other.consumer == name
    finally:
        for c in d.opened:
            await c.close()
