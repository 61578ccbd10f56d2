"""Suspending and resuming an AgentScope agent whose calls park on the bus.

AgentScope resumes a parked reply with ``UserConfirmResultEvent`` or
``ExternalExecutionResultEvent``; these functions forward such answers to the bus
first (6.3), and build them from the bus's answers when the agent is resumed
with no input (the answer came from the inbox, the CLI or another system).
"""
from __future__ import annotations

import json
from typing import Any

from agentscope.event import ConfirmResult, ExternalExecutionResultEvent, UserConfirmResultEvent
from agentscope.message import ToolCallState, ToolResultBlock
from agentscope.permission import PermissionRule

from .. import records
from ..errors import ToolbusError
from ..event import input_digest
from . import _present as P

#: answers the bus no longer takes because it already has one: its answer stands
_SETTLED = ("already_answered", "not_parked")


def parse(raw: Any) -> Any:
    """A call's raw input (AgentScope keeps the model's JSON text) as a value."""
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw


def bus_rule(r: PermissionRule) -> Any:
    beh = r.behavior.value if hasattr(r.behavior, "value") else str(r.behavior)
    return records.Rule(tool=r.tool_name, pattern=r.rule_content or "", behavior=beh)


async def _bus_calls(kit: Any, agent: Any, state: Any = None) -> dict:
    """The agent's waiting calls that wait on the bus, by call id."""
    out = {}
    for c in agent.state.get_awaiting_tool_calls(agent.name):
        if (state is None or c.state == state) and await kit._local(c.name) is None:
            out[c.id] = c
    return out


async def forward_confirmations(kit: Any, agent: Any, event: UserConfirmResultEvent) -> None:
    """An AgentScope confirmation of a bus-parked call goes to the bus first: the
    bus records who answered and runs the call. An edited call is refused, as
    approvers confirm exactly the parked input, before anything is sent."""
    waiting = await _bus_calls(kit, agent)
    answers = [(cr, waiting[cr.tool_call.id]) for cr in event.confirm_results if cr.tool_call.id in waiting]
    for cr, call in answers:
        if cr.confirmed and (cr.tool_call.name != call.name or parse(cr.tool_call.input) != parse(call.input)):
            raise ValueError(
                f"tool call {call.id} waits on the bus for a confirmation of its input as it is: "
                "an edited name or input is refused (docs/protocol.md 6.3)",
            )
    for cr, call in answers:
        name, inp = kit._bus_call(call, parse(call.input))
        rules = [bus_rule(r) for r in (cr.rules or [])] if cr.confirmed else None
        try:
            await kit.client.confirm(name, kit.session, kit._batch_id(agent.state, call.id), P.bus_id(call.id),
                                     cr.confirmed, input_digest=input_digest(inp), rules=rules or None)
        except ToolbusError as e:
            if e.code not in _SETTLED:
                raise


async def forward_results(kit: Any, agent: Any, event: ExternalExecutionResultEvent) -> None:
    """An AgentScope external result of a bus-parked call answers it on the bus
    first, so the bus's record, handlers and inbox agree; its metadata travels
    as a data block (docs/agentscope.md)."""
    waiting = await _bus_calls(kit, agent, ToolCallState.SUBMITTED)
    for r in event.execution_results:
        call = waiting.get(r.id)
        if call is None:
            continue
        out = P.from_blocks(r.output) + ([P.metadata_block(r.metadata)] if r.metadata else [])
        state = "error" if str(r.state) in ("error", "denied", "interrupted") else "success"
        try:
            await kit.client.answer(call.name, kit.session, kit._batch_id(agent.state, call.id),
                                    P.bus_id(call.id), out, state=state)
        except ToolbusError as e:
            if e.code not in _SETTLED:
                raise


async def cancel(kit: Any, agent: Any) -> None:
    """The agent ends its waiting calls interrupted: so does the bus (3.5)."""
    for c in (await _bus_calls(kit, agent)).values():
        await kit.client.cancel(kit.session, kit._batch_id(agent.state, c.id), [P.bus_id(c.id)])


async def resume_event(kit: Any, agent: Any) -> Any:
    """The AgentScope event that resumes a parked reply with what the bus knows
    now, or None when no parked call has its answer yet. A call answered on the
    bus while it waited for a confirmation is resumed as confirmed: the agent
    then runs it, which hands it the bus's result (run, denied or external)."""
    awaiting = list((await _bus_calls(kit, agent)).values())
    key = {c.id: (kit._batch_id(agent.state, c.id), P.bus_id(c.id)) for c in awaiting}
    found = await kit._outcomes.find(list(key.values()), wait=kit.answer_wait)
    executed, confirmed = [], []
    for c in awaiting:
        res = found.get(key[c.id])
        if res is None:
            continue
        if c.state == ToolCallState.SUBMITTED:
            chunk = kit._show.chunk(c.name, res)
            executed.append(ToolResultBlock(id=c.id, name=c.name, output=chunk.content,
                                            state=chunk.state, metadata=chunk.metadata))
        elif c.state == ToolCallState.ASKING:
            confirmed.append(c)
    if executed:
        return ExternalExecutionResultEvent(reply_id=agent.state.reply_id, execution_results=executed)
    if confirmed:
        return UserConfirmResultEvent(reply_id=agent.state.reply_id,
                                      confirm_results=[ConfirmResult(confirmed=True, tool_call=c) for c in confirmed])
    return None
