"""Skills: AgentScope's Skill viewer and skill prompt over the bus's skills
(served by the router with --skills), against a Toolkit with the same skill
folders; a skill in a group is visible only while the group is active."""
from __future__ import annotations

from as_router import Router, as_router  # noqa: F401 (as_router: a fixture; first: skips without agentscope)

import re
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator

import pytest_asyncio

from agentscope.tool import FunctionTool, ToolGroup, Toolkit

from scenario import add, run_bus, run_inprocess

SKILLS = {
    "pdf": "---\nname: pdf\ndescription: Read and fill PDF forms.\n---\n# PDF\n\nUse pdftotext first.\n",
    "notes": "---\nname: notes\ndescription: Keep meeting notes.\n---\n# Notes\n\nOne line per decision.\n",
}

SCRIPT: list[Any] = [
    [("Skill", {"skill": "pdf"}), ("Skill", {"skill": "notes"}), ("Skill", {"skill": "nope"})],
    [("reset_tools", {"docs": True})],
    [("Skill", {"skill": "notes"})],
    [("reset_tools", {})],
    "done",
]


def make_dir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="as-skills-"))
    for name, text in SKILLS.items():
        (root / name).mkdir()
        (root / name / "SKILL.md").write_text(text)
    return root


def skill_toolkit(root: Path) -> Toolkit:
    return Toolkit(
        tools=[FunctionTool(add, is_read_only=True)], skills_or_loaders=[str(root / "pdf")],
        tool_groups=[ToolGroup(name="docs", description="Documents.", skills_or_loaders=[str(root / "notes")])],
    )


@pytest_asyncio.fixture(scope="module", params=["adapter viewer", "router --skill-viewer"])
async def skills_router(bins: Any, request: Any) -> AsyncIterator[tuple[Router, Path]]:
    """The Skill viewer offered by the adapter (over load_skill_through_path),
    or by the router itself."""
    root = make_dir()
    extra = ["--skill-viewer"] if request.param.startswith("router") else []
    r = Router(None, str(root), *extra)
    try:
        await r.ready()
        yield r, root
    finally:
        r.stop()


def without_loader(schemas: list[list[dict]]) -> list[list[dict]]:
    return [[t for t in turn if t["function"]["name"] != "load_skill_through_path"] for turn in schemas]


def dirs_out(prompts: list[str]) -> list[str]:
    """Deliberate differences of the skill prompt: ``<dir>`` names the bus, not a
    local folder, and skills come sorted by name (the bus's listing does not say
    which group holds a skill), not basic's first."""
    out = []
    for p in prompts:
        p = re.sub(r"<dir>.*?</dir>", "<dir/>", p)
        skills = re.findall(r"\n<skill>.*?</skill>", p, flags=re.S)
        head = p.split("\n<skill>")[0]
        out.append(head + "".join(sorted(skills)) + ("\n</agent-skills>\n" if skills else ""))
    return out


async def test_skill_viewer_and_prompt(skills_router: tuple[Router, Path], session: str) -> None:
    router, root = skills_router
    want = await run_inprocess(SCRIPT, skill_toolkit(root))
    got = await run_bus(router.url, session, SCRIPT, skill_toolkit(root))
    assert got["results"] == want["results"]
    # deliberate: the bus also lists its loader, for a skill's other files
    assert all(any(t["function"]["name"] == "load_skill_through_path" for t in turn) for turn in got["schemas"])
    assert without_loader(got["schemas"]) == want["schemas"]
    # deliberate: <dir> names the bus, not a local folder
    assert dirs_out(got["system"]) == dirs_out(want["system"])
