"""Table tests of the pure presentation rules (toolbus.agentscope._present)."""
from __future__ import annotations

import pytest

pytest.importorskip("agentscope")

from toolbus.agentscope import _present as P  # noqa: E402
from toolbus.agentscope import external_tool  # noqa: E402


@pytest.mark.parametrize("parts,want", [
    (("r1", "call_1"), "r1-call_1"),
    (("r1", "toolu_01ABC"), "r1-toolu_01ABC"),
    (("r1", "call:1/x"), None),          # not an identifier: hashed
    (("r" * 100, "c" * 40), None),       # too long: hashed
])
def test_bus_id(parts: tuple, want: str | None) -> None:
    got = P.bus_id(*parts)
    if want is not None:
        assert got == want
    else:
        assert got.startswith("h") and len(got) == 41 and got == P.bus_id(*parts)
        assert got != P.bus_id(parts[0], parts[1] + "x")


def t(name: str, *groups: str) -> dict:
    return {"name": name, "groups": list(groups)} if groups else {"name": name}


@pytest.mark.parametrize("tools,active,want", [
    ([t("a"), t("reset_tools")], ["basic"], ["reset_tools", "a"]),
    ([t("d", "ops"), t("a"), t("f", "web")], ["basic", "ops", "web"], ["a", "d", "f"]),
    ([t("f", "web"), t("d", "ops")], ["basic", "ops", "web"], ["d", "f"]),
    ([t("x", "ops", "web")], ["basic", "web"], ["x"]),
    ([t("load_skill_through_path"), t("a"), t("Skill"), t("reset_tools")], ["basic"],
     ["Skill", "reset_tools", "a", "load_skill_through_path"]),
    ([t("ext_req", "nope"), t("a")], ["basic"], ["a", "ext_req"]),
])
def test_agentscope_order(tools: list, active: list, want: list) -> None:
    assert [x["name"] for x in P.agentscope_order(tools, active)] == want


@pytest.mark.parametrize("text,want", [
    ("", []),
    ("# Agent skills\nSkills are ...\n\n## notes\nKeep notes.\n\n## pdf\nPDF forms.\nTwo lines.\n",
     [("notes", "Keep notes."), ("pdf", "PDF forms.\nTwo lines.")]),
])
def test_parse_skills_prompt(text: str, want: list) -> None:
    assert P.parse_skills_prompt(text) == want


@pytest.mark.parametrize("text,want", [
    ("All tool groups are currently deactivated.", "All tool groups are currently deactivated."),
    ('<group name="a">x</group>\n<group name="b">y</group>', '<group name="a">x</group><group name="b">y</group>'),
])
def test_reset_text(text: str, want: str) -> None:
    assert P.reset_text(text) == want


@pytest.mark.parametrize("text,want", [
    ("Skill: pdf\nDescription: d\nSource: dir:/x\n\n# PDF\n\nBody.\n", "# PDF\n\nBody."),
    ("# just a body", "# just a body"),
])
def test_skill_body(text: str, want: str) -> None:
    assert P.skill_body(text) == want


@pytest.mark.parametrize("text,want", [
    ("PermissionDeniedError: The tool 'w' may not run: explore mode denies tools that are not read-only.",
     "Permission denied for w (explore mode is read-only)"),
    ("PermissionDeniedError: The tool 'w' may not run: dont_ask mode denies what would ask: no rule allows this call of w.",
     "Permission denied for w (dont_ask mode - user not available)"),
    ("PermissionDeniedError: The tool 'w' may not run: dont_ask mode denies what would ask: rule w asks for confirmation.",
     "Permission denied for w (dont_ask mode - ASK converted to DENY, user not available)"),
    ("PermissionDeniedError: The tool 'w' may not run: rule w denies it.", "Permission to use w has been denied"),
    ('<system-reminder>The execution of tool "w" is denied by user!</system-reminder>',
     '<system-reminder>The execution of tool "w" is denied by user!</system-reminder>'),
    ("PermissionDeniedError: The tool 'w' may not run: something new.",
     "PermissionDeniedError: The tool 'w' may not run: something new."),
])
def test_denied_text(text: str, want: str) -> None:
    assert P.denied_text(text) == want


def test_metadata_round_trip() -> None:
    meta = {"answers": [{"question": "Which?", "selected": ["A"], "other": None}]}
    out = [{"type": "text", "text": "A"}, P.metadata_block(meta)]
    rest, got = P.split_metadata(out)
    assert rest == [{"type": "text", "text": "A"}] and got == meta
    bad = {"type": "data", "media_type": P.METADATA_MEDIA, "data": "bm90IGpzb24="}  # not JSON: stays output
    assert P.split_metadata([bad]) == ([bad], {})


def test_request_of() -> None:
    tool = external_tool("pick", "Pick.", {"type": "object", "title": "T", "properties": {"x": {"type": "string", "title": "X"}}})
    assert P.request_of([tool], "external_only") == {"merge_mode": "external_only", "external_tools": [
        {"name": "pick", "description": "Pick.", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}]}
    assert P.request_of([], "") == {}
