"""How the bus's listing and results are shown to an AgentScope agent.

Pure functions (no I/O), so each rule has a table test: the order AgentScope's
Toolkit lists tools in, its texts for ``reset_tools`` and the ``Skill`` viewer,
and the conversion of bus results into AgentScope blocks.
"""
from __future__ import annotations

import base64
import hashlib
import re
from typing import Any, Iterable

from agentscope.message import Base64Source, DataBlock, TextBlock, URLSource
from agentscope.tool._builtin import ResetTools, SkillViewer

RESET = "reset_tools"
LOADER = "load_skill_through_path"
SEARCH = "search_tools"
VIEWER = SkillViewer.name  # "Skill"

#: AgentScope's own description of reset_tools (its class attribute, not a copy)
RESET_DESCRIPTION: str = ResetTools.description
#: AgentScope's Skill viewer: description and schema
VIEWER_DESCRIPTION: str = SkillViewer.description
VIEWER_SCHEMA: dict = SkillViewer.input_schema

_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def bus_id(*parts: str) -> str:
    """A bus identifier (section 1) made from AgentScope ids, deterministic, so a
    later process finds the same batch from the agent's saved state."""
    cand = "-".join(parts)
    if _ID.match(cand):
        return cand
    return "h" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


def function_schema(name: str, description: str, parameters: dict) -> dict:
    """One entry of the model's tool list, as AgentScope's Toolkit makes it."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def agentscope_order(
    tools: list[dict],
    groups: list[str],
) -> list[dict]:
    """Orders bus tool definitions (``toolbus`` format) as AgentScope's Toolkit
    orders its list: ``Skill`` and ``reset_tools`` first, then the tools group by group in
    registration order (``basic`` first), each group's tools in their order;
    tools no group explains (request-scoped, built-ins) keep their place after."""
    rank = {g: i for i, g in enumerate(groups)}

    def key(ix_t: tuple[int, dict]) -> tuple[int, int, int]:
        ix, t = ix_t
        if t["name"] == VIEWER:  # the router's own (router --skill-viewer)
            return (0, -1, ix)
        if t["name"] == RESET:
            return (0, 0, ix)
        gs = t.get("groups") or ["basic"]
        r = min((rank[g] for g in gs if g in rank), default=None)
        if r is None or t["name"] in (LOADER, SEARCH):
            return (2, 0, ix)
        return (1, r, ix)

    return [t for _, t in sorted(enumerate(tools), key=key)]


def parse_skills_prompt(prompt: str) -> list[tuple[str, str]]:
    """The (name, description) pairs of the bus's ``skills_prompt`` (section 10:
    one ``## <name>`` heading per visible skill, then its description)."""
    out = []
    for part in ("\n" + prompt).split("\n## ")[1:]:
        name, _, desc = part.partition("\n")
        out.append((name.strip(), desc.strip()))
    return out


def reset_text(text: str) -> str:
    """reset_tools' success text as AgentScope's default template renders it:
    the ``<group>`` elements of the instructions follow each other with no
    separator (the bus puts one per line)."""
    return text.replace("</group>\n<group name=", "</group><group name=")


def skill_body(text: str) -> str:
    """The SKILL.md body of the bus loader's answer (``Skill:``, ``Description:``,
    ``Source:`` lines, an empty line, the body), which is all AgentScope's
    ``Skill`` viewer returns."""
    head, sep, body = text.partition("\n\n")
    if sep and head.startswith("Skill: ") and "\nSource: " in head:
        return body.strip()
    return text


#: media type of the data block that carries an external result's metadata
#: (AgentScope's ``ToolResultBlock.metadata``, e.g. AskUser's answers) through a
#: bus answer, whose members are only ``state`` and ``output`` (6.3)
METADATA_MEDIA = "application/vnd.agentscope.metadata+json"


def metadata_block(metadata: Any) -> dict:
    """The data block that carries metadata in a bus answer."""
    import json

    raw = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode()
    return {"type": "data", "media_type": METADATA_MEDIA, "data": base64.b64encode(raw).decode()}


def split_metadata(output: Iterable[Any]) -> tuple[list[Any], dict]:
    """Bus output without its metadata block, and the metadata it carried. A block
    that does not decode to an object (not base64, not JSON, nested past Python's
    stack: a hostile worker's or handler's) stays an ordinary block."""
    import json

    rest, meta = [], {}
    for b in output:
        d = b if isinstance(b, dict) else b.to_json()
        if d.get("type") == "data" and d.get("media_type") == METADATA_MEDIA and d.get("data"):
            data = d["data"]
            try:
                val = json.loads(base64.b64decode(data) if isinstance(data, str) else bytes(data))
                if isinstance(val, dict):
                    meta.update(val)
                    continue
            except (ValueError, RecursionError):  # RecursionError: not caught before session 40
                pass
        rest.append(b)
    return rest, meta


def _followed(url: str) -> bool:
    """Whether AgentScope may be handed a url of the bus as a URLSource: http(s)
    only. Its formatters read a ``file://`` url from the agent's own disk into
    the model's request (and ``open`` one that is missing at every later turn)."""
    return url.lower().startswith(("https://", "http://"))


def to_blocks(output: Iterable[Any]) -> list[TextBlock | DataBlock]:
    """Bus output blocks (records or dicts) as AgentScope blocks. A url that is
    not http(s) (a stored output's ``nats-object://``, a worker's ``file://``) is
    a line of text, as in ``Client.turn``, never a URLSource (docs/security.md)."""
    from ..model import _stored_text
    from ..records import Block

    out: list[TextBlock | DataBlock] = []
    said = ""
    for b in output:
        d = b if isinstance(b, dict) else b.to_json()
        url = d.get("url") or ""
        if d.get("type") == "text":
            out.append(TextBlock(text=d.get("text", "")))
            said += d.get("text", "") + "\n"
        elif url and not _followed(url):
            if url not in said:  # a stored output's preview names it already (5.9)
                line = _stored_text(Block.from_json(d)) if url.startswith("nats-object://") else (
                    f"[File {url} ({d.get('media_type', '')}).]")
                out.append(TextBlock(text=line))
                said += line + "\n"
        elif url:
            out.append(
                DataBlock(
                    name=d.get("name") or None,
                    source=URLSource(url=url, media_type=d.get("media_type", "")),
                ),
            )
        else:
            data = d.get("data", "")
            if isinstance(data, bytes):
                data = base64.b64encode(data).decode()
            out.append(
                DataBlock(
                    name=d.get("name") or None,
                    source=Base64Source(data=data, media_type=d.get("media_type", "")),
                ),
            )
    return out


def from_blocks(output: Any) -> list[dict]:
    """AgentScope output (a str or blocks) as bus output blocks (dicts)."""
    if isinstance(output, str):
        return [{"type": "text", "text": output}]
    out: list[dict] = []
    for b in output or []:
        if isinstance(b, TextBlock):
            out.append({"type": "text", "text": b.text})
        elif isinstance(b, DataBlock):
            src = b.source
            if isinstance(src, URLSource):
                out.append({"type": "data", "media_type": src.media_type, "url": str(src.url)})
            else:
                out.append({"type": "data", "media_type": src.media_type, "data": src.data})
    return out


_DENIED = re.compile(r"^PermissionDeniedError: The tool '(?P<t>[^']*)' may not run: (?P<why>.*)\.$", re.S)


def denied_text(text: str) -> str:
    """A bus denial by the mode or a rule (3.3) in the words of AgentScope's
    permission engine; other texts (a person's refusal, with or without a
    reason) are AgentScope's already."""
    m = _DENIED.match(text)
    if m is None:
        return text
    t, why = m["t"], m["why"]
    if why.startswith("explore mode"):
        return f"Permission denied for {t} (explore mode is read-only)"
    if why.startswith("dont_ask mode denies what would ask: no rule allows"):
        return f"Permission denied for {t} (dont_ask mode - user not available)"
    if why.startswith("dont_ask mode"):
        return f"Permission denied for {t} (dont_ask mode - ASK converted to DENY, user not available)"
    if why.startswith("rule ") and why.endswith(" denies it"):
        return f"Permission to use {t} has been denied"
    return text


def request_of(tools: Iterable[Any], merge_mode: str = "") -> dict:
    """A request (4.3) from AgentScope tools: each becomes a schema-only tool the
    caller answers (name, description, input schema without titles)."""
    import copy

    from agentscope.tool._utils import _remove_title_field

    ext = []
    for t in tools:
        schema = copy.deepcopy(t.input_schema)
        _remove_title_field(schema)
        ext.append({"name": t.name, "description": t.description or "", "input_schema": schema})
    req: dict = {}
    if merge_mode:
        req["merge_mode"] = merge_mode
    if ext:
        req["external_tools"] = ext
    return req
