"""Deferred listings (4.1) and the provider's tool search loads in Client.turn (4.2), on a real router."""

from __future__ import annotations

import pytest

import toolbus
from conftest import unique


async def _grouped_tool(worker_factory):
    group, name = unique("pyg"), unique("py_forecast")

    @toolbus.tool(name=name, read_only=True, groups=[group])
    async def forecast(city: str) -> str:
        """Forecast for a city."""
        return "sunny in " + city

    await worker_factory(forecast, groups=[toolbus.Group(group, "Weather forecasts.")])
    return group, name


async def test_deferred_listing_and_anthropic_load(client, worker_factory, session):
    group, name = await _grouped_tool(worker_factory)
    tl = await client.tools(session, "anthropic", deferred=True)
    assert tl.deferred.get(name) == group
    entry = next(t for t in tl.tools if t.get("name") == name)
    assert entry["defer_loading"] is True
    assert tl.tools[-1]["type"] == "tool_search_tool_bm25_20251119"
    plain = await client.tools(session, "anthropic")
    assert name not in plain.names and plain.deferred == {}
    with pytest.raises(toolbus.BusError, match="bad_request"):
        await client.tools(session, "openai", deferred=True)  # deferred listings are openai-responses and anthropic only

    msg = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_bm25", "input": {"query": "forecast"}},
        {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": {"type": "tool_search_tool_search_result", "tool_references": [{"type": "tool_reference", "tool_name": name}]}},
        {"type": "tool_use", "id": "toolu_1", "name": name, "input": {"city": "Oslo"}}]}
    out = await client.turn(session, "anthropic", msg)
    assert out.activated == [group]
    blocks = out.messages[0]["content"]
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1"] and "sunny in Oslo" in str(blocks[0]["content"])
    after = await client.tools(session, "anthropic")
    assert name in after.names


async def test_responses_namespace_load_keeps_active(client, worker_factory, session):
    g1, n1 = await _grouped_tool(worker_factory)
    g2, n2 = await _grouped_tool(worker_factory)
    await client.call(session, [toolbus.Call("r", "reset_tools", {g1: True})])
    msg = {"output": [
        {"type": "tool_search_call", "id": "ts_1", "arguments": {"query": "forecast"}},
        {"type": "tool_search_output", "id": "tso_1", "tools": [{"type": "namespace", "name": g2}, {"type": "namespace", "name": "nope"}]},
        {"type": "function_call", "call_id": "fc_1", "namespace": g2, "name": n2, "arguments": '{"city":"Rome"}'}]}
    out = await client.turn(session, "openai-responses", msg)
    assert out.activated == [g2]
    assert out.messages[0]["call_id"] == "fc_1" and "sunny in Rome" in out.messages[0]["output"]
    active = {g.name for g in (await client.tools(session)).groups if g.active}
    assert {g1, g2} <= active  # the active group is kept in the final set


def test_load_groups_and_reset_input():
    tl = toolbus.ToolsList(groups=[toolbus.GroupInfo("basic", "", "basic", True), toolbus.GroupInfo("a", "", "meta", True),
                                   toolbus.GroupInfo("b", "", "meta", False), toolbus.GroupInfo("x", "", "external", True)],
                           deferred={"t_b": "b", "t_c": "c"})
    assert toolbus.load_groups(tl, [("b", ""), ("", "t_c"), ("", "unknown"), ("zz", ""), ("a", "")]) == (["a", "b", "c"], ["b", "c"])
    assert toolbus.reset_input(["a", "b"]) == {"a": True, "b": True} and toolbus.reset_input([]) == {}
    t = toolbus.model.parse_turn("anthropic", {"content": [{"type": "tool_search_tool_result", "content": {"type": "tool_search_tool_result_error"}}]})
    assert t.loads == [] and t.calls == []
    with pytest.raises(toolbus.NoToolCallsError):
        toolbus.parse_model_turn("openai-responses", {"output": [{"type": "tool_search_output", "tools": [{"type": "namespace", "name": "b"}]}]})
