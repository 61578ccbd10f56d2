"""The differential suite: the same scripted conversation with AgentScope's own
Toolkit and with the bus-backed one must show the model the same tools and give
it the same results (docs/agentscope.md lists what differs on purpose)."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

from scenario import GROUPS_SCRIPT, run_bus, run_inprocess



async def test_groups_and_reset_tools(as_router: Router, session: str) -> None:
    want = await run_inprocess(GROUPS_SCRIPT)
    got = await run_bus(as_router.url, session, GROUPS_SCRIPT)
    for i, (w, g) in enumerate(zip(want["results"], got["results"])):
        assert g == w, f"result {i}"
    assert len(got["results"]) == len(want["results"])
    for turn, (w, g) in enumerate(zip(want["schemas"], got["schemas"])):
        assert g == w, f"tool list of turn {turn}"
    assert got["final"] == want["final"]
