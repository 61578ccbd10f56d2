"""Red team, session 34 (docs/security.md, "Attacks, and what stops each")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolbus.offload import Offloader, TooLargeError, output_size
from toolbus.records import Annotations, Block


@pytest.mark.parametrize("member", ["description", "name", "title", "uri"])
async def test_attack_fit_uncounted_members(member: str) -> None:
    """A block whose bytes are in a member fit's quick bound did not count (a bridged MCP server's
    resource_link with a 2 MiB description) passed as fitting: sent inline past the inline limit and
    the output ceiling. Now past the ceiling is TooLargeError, past the inline limit it is stored."""
    off = Offloader(SimpleNamespace(max_payload=8 << 20), "o_outputs", inline=4 << 10, max_output=1 << 20)
    with pytest.raises(TooLargeError):
        await off.fit("s1.r1.c1", [Block(type="text", **{member: "x" * (2 << 20)})])
    with pytest.raises(AttributeError):  # it went on to store the block: the fake connection has no JetStream
        await off.fit("s1.r1.c1", [Block(type="text", **{member: "x" * (8 << 10)})])
    small = [Block(type="text", text="hi", annotations=Annotations(audience=["user"], priority=0.5, last_modified="2026-12-07T00:00:00Z"))]
    assert await off.fit("s1.r1.c1", small) == small and output_size(small, False) < 4 << 10
