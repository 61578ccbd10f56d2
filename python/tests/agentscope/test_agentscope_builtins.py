"""AgentScope's built-in tools (Bash, Read, Write, Edit, Glob, Grep) served on
the bus with serve(): the same conversation in-process and through the bus, in
bypass mode on both sides; Edit needs the Read before it, which the bus keeps in
the session's state (so any worker replica would see it)."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentscope.agent import Agent
from agentscope.message import UserMsg
from agentscope.permission import PermissionMode
from agentscope.tool import Bash, Edit, Glob, Grep, Read, Toolkit, Write

from scenario import BusToolkit, ScriptedModel, serve, transcript


def builtins() -> list[Any]:
    return [Bash(), Read(), Write(), Edit(), Glob(), Grep()]


def script(d: str) -> list[Any]:
    return [
        [("Write", {"file_path": f"{d}/a.txt", "content": "hello\nworld\n"})],
        [("Edit", {"file_path": f"{d}/a.txt", "old_string": "world", "new_string": "bus"})],  # no Read yet
        [("Read", {"file_path": f"{d}/a.txt"})],
        [("Edit", {"file_path": f"{d}/a.txt", "old_string": "world", "new_string": "bus"})],
        [("Glob", {"pattern": "*.txt", "path": d}), ("Grep", {"pattern": "bus", "path": d})],
        [("Bash", {"command": f"cat {d}/a.txt", "description": "show it"})],
        [("Read", {"file_path": f"{d}/missing.txt"})],
        "done",
    ]


def normal(t: dict, d: str) -> list[tuple]:
    return [(name, state, text.replace(d, "<d>")) for _, name, state, text in t["results"]]


async def test_builtins_served(as_router: Router, session: str) -> None:
    from toolbus import Client

    d1, d2 = tempfile.mkdtemp(prefix="as-in-"), tempfile.mkdtemp(prefix="as-bus-")
    try:
        model = ScriptedModel(script(d1))
        agent = Agent(name="a", system_prompt="s", model=model, toolkit=Toolkit(tools=builtins()))
        agent.state.permission_context.mode = PermissionMode.BYPASS
        want = transcript(agent, model, await agent.reply(UserMsg(name="u", content="go")))

        worker = await serve(builtins(), url=as_router.url, run=False, heartbeat=1.0)
        try:
            async with await Client.connect(as_router.url) as client:
                await client.admin("session.mode", session, {"mode": "bypass"})
                bus = BusToolkit(client, session)
                model = ScriptedModel(script(d2))
                agent = Agent(name="a", system_prompt="s", model=model, toolkit=bus, middlewares=[bus])
                got = transcript(agent, model, await agent.reply(UserMsg(name="u", content="go")))
        finally:
            await worker.drain()
        assert normal(got, d2) == normal(want, d1)
        assert got["schemas"] == want["schemas"]
        assert Path(d2, "a.txt").read_text() == Path(d1, "a.txt").read_text() == "hello\nbus\n"
    finally:
        shutil.rmtree(d1, ignore_errors=True)
        shutil.rmtree(d2, ignore_errors=True)
