"""One bus call made for an AgentScope agent: sent as a one-call batch, its
result turned into AgentScope's ToolChunk, and, when its worker reports
progress, streamed to the agent chunk by chunk (section 5.3)."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator

from agentscope.message import TextBlock, ToolResultState
from agentscope.tool import ToolChunk, ToolResponse

from .. import event as ev
from . import _present as P

_STATES = {
    "success": ToolResultState.SUCCESS,
    "error": ToolResultState.ERROR,
    "denied": ToolResultState.DENIED,
    "interrupted": ToolResultState.INTERRUPTED,
}


class Running:
    """A bus call that runs: its event stream, its batch request and the
    progress events not yet shown."""

    def __init__(self, stream: Any, task: Any, call_id: str, pending: list) -> None:
        self.stream, self.task, self.call_id, self.pending = stream, task, call_id, pending


class Presentation:
    """Which of AgentScope's texts a result is shown with."""

    def __init__(self, agentscope_texts: bool, viewer: Any) -> None:
        self.agentscope_texts = agentscope_texts
        self.viewer = viewer  # a callable: does the adapter present the Skill viewer itself?

    def chunk(self, name: str, res: Any) -> ToolChunk:
        """A bus result as the ToolChunk AgentScope's own tool would give."""
        if isinstance(res, ToolChunk):
            return res
        output, meta = P.split_metadata(res.output)
        blocks = P.to_blocks(output)
        first = blocks[0] if blocks and isinstance(blocks[0], TextBlock) else None
        if self.agentscope_texts and first is not None:
            if res.state == "denied":
                first.text = P.denied_text(first.text)
            elif res.state == "success" and name == P.RESET:
                first.text = P.reset_text(first.text)
            elif res.state == "success" and name == P.VIEWER and self.viewer():
                first.text = P.skill_body(first.text)
        if isinstance(res.metadata, dict):
            meta = {**res.metadata, **meta}
        return ToolChunk(content=blocks, state=_STATES.get(res.state, ToolResultState.ERROR), metadata=meta)


async def start(client: Any, session: str, call: Any, rid: str, timeout: float, **batch: Any) -> Any:
    """Sends a one-call batch; returns its reply, or a Running as soon as the
    call's first progress arrives (so it runs: it can no longer park)."""
    stream = client.events(session)
    await stream.__aenter__()
    task = asyncio.ensure_future(client.call(session, [call], reply_id=rid, timeout=timeout, **batch))
    try:
        while True:
            getter = asyncio.ensure_future(stream.next(timeout=timeout))
            done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                getter.cancel()
                await stream.aclose()
                return task.result()
            e = getter.result()
            if e.type == ev.TYPE_CALL_PROGRESS and e.replyid == rid and e.toolcallid == call.id:
                return Running(stream, task, call.id, [e])
    except BaseException:
        task.cancel()
        await stream.aclose()
        raise


# What one call's progress may show the agent: a router keeps an honest
# worker's progress far below (5.3: 64 KiB an event, 8 at once, then 4 a
# second), a hostile router or a flood is not shown past it (its result is).
MAX_PROGRESS_SHOWN = 4 << 20


async def _progress(run: Running, timeout: float) -> AsyncGenerator[ToolChunk, None]:
    """The progress of a running call as chunks, until its reply is in (and
    what came before it, within drain's bounds)."""
    shown, ended = 0, False
    while True:
        for e in run.pending:
            content = P.to_blocks((e.data or {}).get("output", []))
            shown += sum(len(b.text) if isinstance(b, TextBlock) else 1024 for b in content)
            if shown <= MAX_PROGRESS_SHOWN:
                yield ToolChunk(content=content, state=ToolResultState.RUNNING, is_last=False)
        run.pending = []
        if ended:
            return
        if run.task.done():
            # progress published before the result may still be on its way
            # through the event subscription: take what came, once
            run.pending, ended = await drain(run.stream, run.call_id), True
            continue
        getter = asyncio.ensure_future(run.stream.next(timeout=timeout))
        done, _ = await asyncio.wait({run.task, getter}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done and getter.exception() is None:
            e = getter.result()
            if e.type == ev.TYPE_CALL_PROGRESS and e.toolcallid == run.call_id:
                run.pending.append(e)
        else:
            getter.cancel()


async def stream(name: str, run: Running, show: Presentation, timeout: float) -> AsyncGenerator[ToolChunk | ToolResponse, None]:
    """A running bus call: its progress as chunks (AgentScope's deltas), then
    its result, of which only what progress has not shown is sent as a delta."""
    sent = ""
    try:
        async for chunk in _progress(run, timeout):
            sent += "".join(b.text for b in chunk.content if isinstance(b, TextBlock))
            yield chunk
        try:
            res = run.task.result().result(run.call_id)
            final = show.chunk(name, res) if res is not None else error(
                f"BusError: the call of tool '{name}' has no result.")
        except Exception as e:
            final = error(failure(name, e))
    finally:
        await run.stream.aclose()
    text = final.content[0].text if len(final.content) == 1 and isinstance(final.content[0], TextBlock) else None
    if text is None or not sent or not text.startswith(sent):
        yield final
    elif text != sent:
        yield ToolChunk(content=[TextBlock(text=text[len(sent):])], state=final.state, is_last=True)
    yield ToolResponse(id=final.id).append_chunk(final)


async def drain(events: Any, call_id: str, wait: float = 0.02, most: float = 0.25) -> list:
    """The progress events of call_id that arrive until none came for ``wait``
    seconds, at most ``most`` seconds (a flood that never pauses ends there)."""
    out: list = []
    loop = asyncio.get_running_loop()
    end = loop.time() + most
    while loop.time() < end:
        try:
            e = await events.next(timeout=min(wait, max(end - loop.time(), 0.001)))
        except Exception:
            return out
        if e.type == ev.TYPE_CALL_PROGRESS and e.toolcallid == call_id:
            out.append(e)
    return out


def error(text: str) -> ToolChunk:
    return ToolChunk(content=[TextBlock(text=text)], state=ToolResultState.ERROR)


def failure(tool: str, e: Exception) -> str:
    """The text the model reads when the bus did not take a call (AgentScope
    shows a failing tool's exception text)."""
    from ..errors import BusError, TimeoutError as BusTimeout

    if isinstance(e, BusTimeout):
        return (f"BusTimeoutError: The bus did not answer the call of tool '{tool}' in time; "
                "it may still run. Do not call it again before checking its effect.")
    if isinstance(e, BusError):
        return f"BusError: The bus refused the call of tool '{tool}': {e}. It did not run."
    return f"BusUnavailableError: The call of tool '{tool}' could not reach the bus ({e}). It did not run."
