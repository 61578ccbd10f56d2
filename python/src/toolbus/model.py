"""Model messages in and out (OpenAI chat, Responses, Anthropic, Gemini), as Go's client/model.go."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .event import _q
from .errors import NoToolCallsError, ProtocolError
from .offload import parse_ref
from .records import Block, Call, Parked, Result

FORMATS = ("openai", "openai-responses", "anthropic", "gemini")


@dataclass
class ModelReply:
    """The messages that answer a model's tool calls, and the calls still parked."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    parked: list[Parked] = field(default_factory=list)
    #: The groups :meth:`Client.turn` activated because the provider's tool search loaded their tools (4.1).
    activated: list[str] = field(default_factory=list)


def _load(message: Any) -> Any:
    if isinstance(message, (bytes, bytearray, str)):
        try:
            return json.loads(message)
        except ValueError as err:
            raise ProtocolError(f"the message is not JSON: {err}", "bad_request") from None
    return message


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: Any, what: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ProtocolError(f"{what} must be a string", "bad_request")
    return v


def _args(s: Any) -> Any:
    s = _str(s, "arguments")
    return {} if not s.strip() else s


def _list(v: Any, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"{what} must be an array", "bad_request")
    return v


@dataclass
class ModelTurn:
    """The tool calls of one model message."""

    format: str
    calls: list[Call] = field(default_factory=list)
    #: What the provider's tool search loaded: (group, tool) pairs, either may be "" (4.1).
    loads: list[tuple[str, str]] = field(default_factory=list)
    _no_id: set[str] = field(default_factory=set)

    def reply(self, results: list[Result], parked: list[Parked] | None = None) -> ModelReply:
        """The results as messages of the model's format, in call order."""
        by_id = {r.id: r for r in results}
        ordered = [by_id[c.id] for c in self.calls if c.id in by_id]
        out = ModelReply(parked=list(parked or []))
        if not ordered:
            return out
        if self.format == "openai":
            out.messages = _openai(ordered)
        elif self.format == "openai-responses":
            out.messages = _responses(ordered)
        elif self.format == "anthropic":
            out.messages = [_anthropic(ordered)]
        else:
            out.messages = [self._gemini(ordered)]
        return out

    def _gemini(self, rs: list[Result]) -> dict[str, Any]:
        parts = []
        for r in rs:
            fr: dict[str, Any] = {}
            if r.id not in self._no_id:
                fr["id"] = r.id
            fr["name"] = r.name
            fr["response"] = {"error" if r.state != "success" else "output": _text(r)}
            imgs = []
            for b in r.output:
                if _is_image(b) and b.url:
                    imgs.append({"fileData": {"mimeType": b.media_type, "fileUri": b.url}})
                elif _is_image(b):
                    imgs.append({"inlineData": {"mimeType": b.media_type, "data": b.data}})
            if imgs:
                fr["parts"] = imgs
            parts.append({"functionResponse": fr})
        return {"role": "user", "parts": parts}


def parse_model_turn(format: str, message: Any) -> ModelTurn:
    """The tool calls of a model's message (a dict, a list, or its JSON text)."""
    t = parse_turn(format, message)
    if not t.calls:
        raise NoToolCallsError("the message has no tool calls")
    return t


def parse_turn(format: str, message: Any) -> ModelTurn:
    """:func:`parse_model_turn` that accepts a message without calls (it may load deferred tools)."""
    if format not in FORMATS:
        raise ProtocolError(f"unknown model format {_q(format)} (want openai, openai-responses, anthropic or gemini)", "bad_request")
    raw = _load(message)
    t = ModelTurn(format)
    try:
        {"openai": _parse_openai, "openai-responses": _parse_responses, "anthropic": _parse_anthropic,
         "gemini": _parse_gemini}[format](t, raw)
    except ProtocolError as err:
        raise ProtocolError(f"{format} message: {err.message}", "bad_request") from None
    seen: set[str] = set()
    for c in t.calls:
        if not c.id or not c.name:
            raise ProtocolError(f"{format} message: a tool call without an id or a name", "bad_request")
        if c.id in seen:
            raise ProtocolError(f"{format} message: tool call id {_q(c.id)} appears twice", "bad_request")
        seen.add(c.id)
    return t


def _parse_openai(t: ModelTurn, raw: Any) -> None:
    m = _obj(raw)
    choices = _list(m.get("choices"), "choices")
    if choices:
        m = _obj(_obj(choices[0]).get("message"))
    for tc in _list(m.get("tool_calls"), "tool_calls"):
        tc = _obj(tc)
        if tc.get("type") not in (None, "", "function"):
            continue
        fn = _obj(tc.get("function"))
        t.calls.append(Call(_str(tc.get("id"), "id"), _str(fn.get("name"), "name"), _args(fn.get("arguments"))))


def _parse_responses(t: ModelTurn, raw: Any) -> None:
    if isinstance(raw, list):
        items = raw
    else:
        r = _obj(raw)
        items = [r] if r.get("type") == "function_call" else _list(r.get("output"), "output")
    for it in items:
        it = _obj(it)
        t.loads += _responses_loads(it)
        if it.get("type") == "function_call":
            t.calls.append(Call(_str(it.get("call_id"), "call_id"), _str(it.get("name"), "name"), _args(it.get("arguments"))))


def _parse_anthropic(t: ModelTurn, raw: Any) -> None:
    blocks = raw if isinstance(raw, list) else _list(_obj(raw).get("content"), "content")
    for b in blocks:
        b = _obj(b)
        if b.get("type") == "tool_search_tool_result":
            t.loads += _anthropic_loads(b.get("content"))
        if b.get("type") == "tool_use":
            t.calls.append(Call(_str(b.get("id"), "id"), _str(b.get("name"), "name"), b.get("input")))


def _responses_loads(it: dict[str, Any]) -> list[tuple[str, str]]:
    """What an OpenAI Responses output item loaded: a tool_search_output's namespaces and functions, or a call's namespace."""
    ns, name = it.get("namespace"), it.get("name")
    if it.get("type") == "function_call" and isinstance(ns, str) and ns:
        return [(ns, name if isinstance(name, str) else "")]
    if it.get("type") != "tool_search_output" or not isinstance(it.get("tools"), list):
        return []
    out = []
    for tool in it["tools"]:
        tool = _obj(tool)
        n = tool.get("name")
        if isinstance(n, str) and n:
            out.append((n, "") if tool.get("type") == "namespace" else ("", n))
    return out


def _anthropic_loads(content: Any) -> list[tuple[str, str]]:
    """The tools a tool_search_tool_result's tool_reference blocks name (an error result loads nothing)."""
    refs = _obj(content).get("tool_references")
    out = []
    for r in refs if isinstance(refs, list) else []:
        r = _obj(r)
        n = r.get("tool_name")
        if r.get("type") == "tool_reference" and isinstance(n, str) and n:
            out.append(("", n))
    return out


def load_groups(tl: Any, loads: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The final set of meta groups after ``loads`` (the active ones, then the loaded ones) and the groups added.

    ``tl`` is the session's deferred listing (:class:`ToolsList`); a load of a group or tool it does not offer
    deferred is ignored, so its calls fail as they would without it (Go's client.loadGroups).
    """
    offered = set(tl.deferred.values())
    final = [g.name for g in tl.groups if g.scope == "meta" and g.active]
    added: list[str] = []
    for group, tool in loads:
        g = group if group in offered else tl.deferred.get(tool, "")
        if g and g not in final:
            final.append(g)
            added.append(g)
    return final, added


def reset_input(groups: list[str]) -> dict[str, bool]:
    """The reset_tools input that activates exactly ``groups``, in order (4.2); ``{}`` deactivates every meta group."""
    return {g: True for g in groups}


def _parse_gemini(t: ModelTurn, raw: Any) -> None:
    if isinstance(raw, list):
        parts = raw
    else:
        r = _obj(raw)
        parts = _list(r.get("parts"), "parts")
        cands = _list(r.get("candidates"), "candidates")
        if cands:
            parts = _list(_obj(_obj(cands[0]).get("content")).get("parts"), "parts")
    for i, p in enumerate(parts):
        fc = _obj(p).get("functionCall")
        if not isinstance(fc, dict):
            continue
        cid = _str(fc.get("id"), "id")
        if not cid:
            cid = f"gemini-call-{i}"
            t._no_id.add(cid)
        t.calls.append(Call(cid, _str(fc.get("name"), "name"), fc.get("args")))


def _is_image(b: Block) -> bool:
    return b.type == "data" and b.media_type.startswith("image/") and not b.is_stored


def _text(r: Result) -> str:
    parts: list[str] = []
    for b in r.output:
        if b.type == "text":
            parts.append(b.text)
        elif b.is_stored:
            if b.url not in "\n".join(parts):
                parts.append(_stored_text(b))
        elif b.url and not _is_image(b):
            parts.append(f"[File {b.url} ({b.media_type}).]")
        elif b.data and not _is_image(b):
            parts.append(f"[A {b.media_type} attachment of {len(b.data)} base64 characters was returned.]")
    return "\n".join(parts)


def _stored_text(b: Block) -> str:
    """The line a model reads for a stored output its result's text does not name (Go's storedText):
    the reference, media type, size and digest, and how to read a part of it (read_output)."""
    digest = ""
    try:
        if d := parse_ref(b.url).digest:
            digest = ", sha256 " + d
    except ProtocolError:
        pass
    return (f"[Stored output {b.url} ({b.media_type}, {b.size} bytes{digest}), too large to show here: read any part of it "
            'with read_output ({"ref": that URL, "offset": <byte> or "line": <n>, "limit": <n>}).]')


def _data_url(b: Block) -> str:
    return b.url or f"data:{b.media_type};base64,{b.data}"


def _openai(rs: list[Result]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for r in rs:
        text = _text(r)
        n = 0
        for b in r.output:
            if _is_image(b):
                images.append({"type": "image_url", "image_url": {"url": _data_url(b)}})
                n += 1
        if n:
            text = (text + f"\n[{n} image(s) follow in the next message.]").strip()
        out.append({"role": "tool", "tool_call_id": r.id, "content": text})
    if images:
        out.append({"role": "user", "content": [{"type": "text", "text": "Images returned by the tool calls above:"}, *images]})
    return out


def _responses(rs: list[Result]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in rs:
        imgs = [b for b in r.output if _is_image(b)]
        if not imgs:
            out.append({"type": "function_call_output", "call_id": r.id, "output": _text(r)})
            continue
        parts: list[dict[str, Any]] = []
        if _text(r):
            parts.append({"type": "input_text", "text": _text(r)})
        parts += [{"type": "input_image", "image_url": _data_url(b)} for b in imgs]
        out.append({"type": "function_call_output", "call_id": r.id, "output": parts})
    return out


def _anthropic(rs: list[Result]) -> dict[str, Any]:
    content = []
    for r in rs:
        parts: list[dict[str, Any]] = []
        if _text(r):
            parts.append({"type": "text", "text": _text(r)})
        for b in r.output:
            if _is_image(b):
                src = {"type": "url", "url": b.url} if b.url else {"type": "base64", "media_type": b.media_type, "data": b.data}
                parts.append({"type": "image", "source": src})
        tr: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.id, "content": parts}
        if r.state != "success":
            tr["is_error"] = True
        content.append(tr)
    return {"role": "user", "content": content}
