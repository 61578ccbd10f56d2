"""A Python worker is indistinguishable on the wire from a Go one: the same register, the same exec
results in every form (structured, binary, compact), the same refusals. Compared against cmd/toolworker on one router."""

from __future__ import annotations

import asyncio
import os
import subprocess

import nats

import toolbus
from conftest import unique
from test_interop import wait_listed
from toolbus import event as ev


def exec_event(tool: str, call_id: str) -> ev.Event:
    return ev.Event(ev.TYPE_EXEC, "toolbus/router/test", {"call": {"id": call_id, "name": tool, "input": {"text": "a b c"}},
                                                           "user": None, "context": None, "attempt": 1},
                    sessionid="wire", replyid="r1", toolcallid=call_id, expirytime=ev.rfc3339(__import__("time").time() + 30))


def shape(e: ev.Event) -> dict:
    """What must match between two workers' answers: everything but ids, times, sources and output text."""
    d = dict(e.data) if isinstance(e.data, dict) else e.data
    if isinstance(d, dict) and "output" in d:
        d["output"] = [sorted(b) for b in d["output"]]
    return {"type": e.type, "sessionid": e.sessionid, "replyid": e.replyid, "toolcallid": e.toolcallid,
            "datacontenttype": e.datacontenttype, "subject": e.subject, "data": d if e.type != ev.TYPE_ERROR else sorted(d)}


async def test_python_worker_matches_go_worker(router, client):
    regs: dict[str, dict] = {}
    nc = await nats.connect(router.url)

    async def on_register(m):  # one request per tool (7.1, 1.12): keyed by worker and tool
        e = ev.decode(m.data, m.headers)
        if isinstance(e.data, dict) and not e.data.get("leaving"):
            regs.setdefault(e.source + " " + m.subject.removeprefix("toolbus.register."), e.data)

    await nc.subscribe("toolbus.register.>", cb=on_register)
    await toolbus._rpc.synced(nc)
    go = subprocess.Popen([str(router.bins["toolworker"]), "--id", "go-wire"], env={**os.environ, "NATS_URL": router.url},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    name = unique("py_word_count")

    @toolbus.tool(name=name, read_only=True)
    async def word_count(text: str) -> str:
        """Count words."""
        return str(len(text.split()))

    w = await toolbus.Worker.connect(router.url, id="py-wire", heartbeat=1.0)
    w.add(word_count)
    await w.start()
    try:
        await wait_listed(client, "word_count")
        go_key, py_key = "toolbus/worker/go-wire word_count", f"toolbus/worker/py-wire {name}"
        for _ in range(300):
            if go_key in regs and py_key in regs:
                break
            await asyncio.sleep(0.1)
        g, p = regs[go_key], regs[py_key]
        assert list(g) == list(p) or set(g) == set(p), (list(g), list(p))
        assert g["binary_exec"] is p["binary_exec"] is True and g["compact_exec"] is p["compact_exec"] is True
        assert g["inflight"] == {"word_count": []} and p["inflight"] == {name: []}, (g["inflight"], p["inflight"])
        assert len(g["tools"]) == len(p["tools"]) == 1
        assert set(g["tools"][0]) == set(p["tools"][0]), (sorted(g["tools"][0]), sorted(p["tools"][0]))

        for mode in ("structured", "binary", "compact"):
            answers, header_sets = [], []
            for tool in ("word_count", name):
                e = exec_event(tool, "c1")
                body, headers = ev.encode_binary(e) if mode != "structured" else ev.encode_structured(e)
                if mode == "compact":  # 5.1: no content-type, ce-time nor bare trace headers
                    headers = {k: v for k, v in headers.items() if k not in ("content-type", "ce-time")}
                m = await nc.request(f"toolbus.exec.{tool}", body, timeout=10, headers=headers)
                assert ev.is_binary(m.headers) == (mode != "structured"), (tool, mode, m.headers)
                re = ev.decode(m.data, m.headers)
                assert re.source.startswith("toolbus/worker/")
                answers.append(re)
                header_sets.append(sorted(m.headers or {}))
            assert shape(answers[0]) == shape(answers[1]), (mode, answers)
            assert header_sets[0] == header_sets[1], (mode, header_sets)
            assert answers[1].data["output"] == [{"type": "text", "text": "3"}]

        # The same refusal for a malformed exec.
        refusals = []
        for tool in ("word_count", name):
            bad = ev.Event(ev.TYPE_EXEC, "t", {"call": {"id": "c1", "name": "someone_else", "input": {}}}, sessionid="s", replyid="r")
            body, headers = ev.encode_structured(bad)
            m = await nc.request(f"toolbus.exec.{tool}", body, timeout=10, headers=headers)
            refusals.append(ev.decode(m.data, m.headers))
        assert [r.type for r in refusals] == [ev.TYPE_ERROR] * 2
        assert refusals[0].data["code"] == refusals[1].data["code"] == "bad_event"
        assert refusals[1].data["message"] == refusals[0].data["message"].replace("word_count", name), refusals
    finally:
        go.terminate()
        go.wait(20)
        await w.drain()
        await nc.close()
