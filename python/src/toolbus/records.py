"""Wire records (docs/protocol.md 3-7) as dataclasses.

``from_json`` decodes as the protocol says: tool definitions, groups, rules, the request-scoped
configuration, output blocks of answers and answers themselves strictly (a member the protocol
does not name raises :class:`ProtocolError` naming it); everything else leniently (unknown members
ignored). A wrongly typed member is refused everywhere.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, TypeVar

from .errors import ProtocolError

T = TypeVar("T")

_KINDS: dict[type, str] = {str: "a string", bool: "a boolean", int: "a number", float: "a number",
                           list: "an array", dict: "an object"}


def _kind_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _check(obj: Any, what: str, members: Mapping[str, type | None], strict: bool, code: str = "bad_request") -> dict[str, Any]:
    """Check obj is an object whose members have the named JSON types (None: any)."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what}: must be an object, got {_kind_of(obj)}", code)
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if k not in members:
            if strict:
                raise ProtocolError(f'{what}: unknown member "{k}"', code)
            continue
        want = members[k]
        if v is None or want is None or type(v) is want:
            out[k] = v
            continue
        ok = isinstance(v, want) and not (want in (int, float) and isinstance(v, bool))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            ok = True
        if want is int and isinstance(v, float) and v.is_integer():
            v, ok = int(v), True
        if not ok:
            raise ProtocolError(f'{what}: member "{k}" must be {_KINDS[want]}, got {_kind_of(v)}', code)
        out[k] = v
    return out


def _list(v: Any, what: str, item: Callable[[Any, str], T]) -> list[T]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"{what}: must be an array, got {_kind_of(v)}")
    return [item(x, f"{what}[{i}]") for i, x in enumerate(v)]


def _omit(d: dict[str, Any]) -> dict[str, Any]:
    """Drop empty optional members, as Go's omitempty does."""
    return {k: v for k, v in d.items() if v not in ("", None, 0, [], {}) or isinstance(v, bool) and v}


@dataclass
class Annotations:
    audience: list[str] = field(default_factory=list)
    priority: float | None = None
    last_modified: str = ""

    @classmethod
    def from_json(cls, obj: Any, what: str = "annotations", strict: bool = False) -> Annotations:
        m = _check(obj, what, {"audience": list, "priority": float, "last_modified": str}, strict)
        return cls(audience=[str(a) for a in m.get("audience") or []], priority=m.get("priority"),
                   last_modified=m.get("last_modified") or "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.audience:
            out["audience"] = self.audience
        if self.priority is not None:
            out["priority"] = self.priority
        if self.last_modified:
            out["last_modified"] = self.last_modified
        return out


_BLOCK = {"type": str, "text": str, "media_type": str, "data": str, "url": str, "size": int, "uri": str,
          "name": str, "title": str, "description": str, "annotations": dict}


@dataclass
class Block:
    """An output block: ``text``, or ``data`` with ``media_type`` and one of ``data``/``url`` (3.3)."""

    type: str
    text: str = ""
    media_type: str = ""
    data: str = ""
    url: str = ""
    size: int = 0
    uri: str = ""
    name: str = ""
    title: str = ""
    description: str = ""
    annotations: Annotations | None = None

    @staticmethod
    def text_block(s: str) -> Block:
        return Block(type="text", text=s)

    @staticmethod
    def data_block(media_type: str, data: bytes | str = b"", *, url: str = "", size: int = 0) -> Block:
        """A data block; ``data`` bytes are base64-encoded, a str is taken as base64 already."""
        if isinstance(data, (bytes, bytearray)):
            data = base64.b64encode(data).decode()
        return Block(type="data", media_type=media_type, data=data, url=url, size=size)

    @property
    def is_stored(self) -> bool:
        """Whether the block is a reference to a stored output (5.9)."""
        return self.type == "data" and self.url.startswith("nats-object://")

    @classmethod
    def from_json(cls, obj: Any, what: str = "block", strict: bool = False) -> Block:
        m = _check(obj, what, _BLOCK, strict)
        ann = m.pop("annotations", None)
        b = cls(**{k: v for k, v in m.items() if v is not None})
        if ann is not None:
            b.annotations = Annotations.from_json(ann, what + ".annotations", strict)
        return b

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.text or self.type == "text":
            out["text"] = self.text
        for k in ("media_type", "data", "url", "size", "uri", "name", "title", "description"):
            v = getattr(self, k)
            if v:
                out[k] = v
        if self.annotations is not None:
            out["annotations"] = self.annotations.to_json()
        return out


def blocks_json(output: list[Block]) -> list[dict[str, Any]]:
    return [b.to_json() for b in output]


def to_blocks(output: Any) -> list[Block]:
    """str → one text block; a Block, a dict or a list of them (or of strs) → blocks."""
    if output is None:
        return []
    if isinstance(output, str):
        return [Block.text_block(output)]
    if isinstance(output, Block):
        return [output]
    if isinstance(output, dict):
        return [Block.from_json(output, "output[0]", strict=True)]
    if isinstance(output, (list, tuple)):
        out = []
        for i, b in enumerate(output):
            if isinstance(b, Block):
                out.append(b)
            elif isinstance(b, str):
                out.append(Block.text_block(b))
            else:
                out.append(Block.from_json(b, f"output[{i}]", strict=True))
        return out
    raise TypeError(f"an output must be text, a Block or a list of them, not {type(output).__name__}")


@dataclass
class Call:
    """One tool call of a batch (3.1). ``input`` is a dict, or a str holding one; None is absent."""

    id: str
    name: str
    input: Any = None
    background: bool = False  # go on as a background task past the timeout (5.10)

    @classmethod
    def from_json(cls, obj: Any, what: str = "call") -> Call:
        m = _check(obj, what, {"id": str, "name": str, "input": None, "background": bool}, False)
        return cls(id=m.get("id") or "", name=m.get("name") or "", input=m.get("input"), background=bool(m.get("background")))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name}
        if self.input is not None:
            out["input"] = self.input
        if self.background:
            out["background"] = True
        return out


@dataclass
class Detail:
    path: str
    message: str


@dataclass
class ResultError:
    code: str
    message: str
    details: list[Detail] = field(default_factory=list)
    retry_after_ms: int = 0

    @classmethod
    def from_json(cls, obj: Any, what: str = "error") -> ResultError:
        m = _check(obj, what, {"code": str, "message": str, "details": list, "retry_after_ms": int}, False)
        det = _list(m.get("details"), what + ".details", lambda d, w: Detail(
            **{k: v or "" for k, v in _check(d, w, {"path": str, "message": str}, False).items()}))
        return cls(code=m.get("code") or "", message=m.get("message") or "", details=det,
                   retry_after_ms=m.get("retry_after_ms") or 0)


@dataclass
class Result:
    """A finished call (3.3)."""

    id: str
    name: str
    state: str
    output: list[Block] = field(default_factory=list)
    error: ResultError | None = None
    metadata: Any = None
    task: dict[str, Any] | None = None  # the handle of a result in state "background" (5.10)

    @property
    def ok(self) -> bool:
        return self.state == "success"

    @property
    def text(self) -> str:
        """The text blocks joined by newlines."""
        return "\n".join(b.text for b in self.output if b.type == "text")

    @classmethod
    def from_json(cls, obj: Any, what: str = "result") -> Result:
        m = _check(obj, what, {"id": str, "name": str, "state": str, "output": list, "error": dict, "metadata": None, "task": dict}, False)
        if not m.get("state"):
            raise ProtocolError(f"{what}: state is missing")
        err = m.get("error")
        return cls(id=m.get("id") or "", name=m.get("name") or "", state=m["state"],
                   output=_list(m.get("output"), what + ".output", Block.from_json),
                   error=ResultError.from_json(err, what + ".error") if err is not None else None,
                   metadata=m.get("metadata"), task=m.get("task"))


@dataclass
class Rule:
    tool: str
    pattern: str = ""
    behavior: str = ""

    @classmethod
    def from_json(cls, obj: Any, what: str = "rule", strict: bool = False) -> Rule:
        m = _check(obj, what, {"tool": str, "pattern": str, "behavior": str}, strict)
        return cls(tool=m.get("tool") or "", pattern=m.get("pattern") or "", behavior=m.get("behavior") or "")

    def to_json(self) -> dict[str, Any]:
        return _omit({"tool": self.tool, "pattern": self.pattern, "behavior": self.behavior}) | {"tool": self.tool}


@dataclass
class Parked:
    """A call waiting for an answer (3.2): ``kind`` external, confirm or queued."""

    id: str
    name: str
    input: Any
    kind: str
    subject: str
    suggested_rules: list[Rule] = field(default_factory=list)

    @property
    def tool(self) -> str:
        return self.name

    @classmethod
    def from_json(cls, obj: Any, what: str = "parked") -> Parked:
        m = _check(obj, what, {"id": str, "name": str, "input": None, "kind": str, "subject": str,
                               "suggested_rules": list}, False)
        return cls(id=m.get("id") or "", name=m.get("name") or "", input=m.get("input"), kind=m.get("kind") or "",
                   subject=m.get("subject") or "",
                   suggested_rules=_list(m.get("suggested_rules"), what + ".suggested_rules", Rule.from_json))


@dataclass
class Reply:
    """``io.toolbus.call.reply`` (3.2)."""

    results: list[Result] = field(default_factory=list)
    parked: list[Parked] = field(default_factory=list)
    session_rev: int = 0

    def result(self, call_id: str) -> Result | None:
        return next((r for r in self.results if r.id == call_id), None)

    @classmethod
    def from_json(cls, obj: Any, what: str = "reply") -> Reply:
        m = _check(obj, what, {"results": list, "parked": list, "sessionrev": int}, False, "bad_event")
        return cls(results=_list(m.get("results"), what + ".results", Result.from_json),
                   parked=_list(m.get("parked"), what + ".parked", Parked.from_json),
                   session_rev=m.get("sessionrev") or 0)


@dataclass
class ExternalTool:
    name: str
    description: str
    input_schema: dict[str, Any]

    @classmethod
    def from_json(cls, obj: Any, what: str = "external_tool", strict: bool = True) -> ExternalTool:
        m = _check(obj, what, {"name": str, "description": str, "input_schema": dict}, strict)
        return cls(name=m.get("name") or "", description=m.get("description") or "",
                   input_schema=m.get("input_schema") or {})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass
class Request:
    """The request-scoped tool configuration (4.3), decoded strictly."""

    merge_mode: str = ""
    external_tools: list[ExternalTool] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any, what: str = "request") -> Request:
        m = _check(obj, what, {"merge_mode": str, "external_tools": list}, True)
        return cls(merge_mode=m.get("merge_mode") or "",
                   external_tools=_list(m.get("external_tools"), what + ".external_tools", ExternalTool.from_json))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.merge_mode:
            out["merge_mode"] = self.merge_mode
        if self.external_tools:
            out["external_tools"] = [t.to_json() for t in self.external_tools]
        return out


@dataclass
class GroupInfo:
    name: str
    description: str
    scope: str
    active: bool


@dataclass
class ToolsList:
    """``io.toolbus.tools.list`` (4.1): ``tools`` in the format asked."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupInfo] = field(default_factory=list)
    skills_prompt: str = ""
    session_rev: int = 0
    #: With ``deferred=True`` (4.1): each deferred tool's group, by tool name.
    deferred: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The tools' names, whatever the format."""
        out = []
        for t in self.tools:
            fn = t.get("function")
            out.append((fn or {}).get("name") if isinstance(fn, dict) else t.get("name"))
        return [n for n in out if isinstance(n, str)]

    @classmethod
    def from_json(cls, obj: Any, what: str = "tools.list") -> ToolsList:
        m = _check(obj, what, {"tools": list, "groups": list, "skills_prompt": str, "sessionrev": int, "deferred": dict}, False, "bad_event")
        deferred = m.get("deferred") or {}
        for k, v in deferred.items():
            if not isinstance(v, str):
                raise ProtocolError(f"{what}.deferred.{k}: must be a string, got {_kind_of(v)}", "bad_event")

        def group(g: Any, w: str) -> GroupInfo:
            d = _check(g, w, {"name": str, "description": str, "scope": str, "active": bool}, False)
            return GroupInfo(d.get("name") or "", d.get("description") or "", d.get("scope") or "", bool(d.get("active")))

        def tool(t: Any, w: str) -> dict[str, Any]:
            if not isinstance(t, dict):
                raise ProtocolError(f"{w}: must be an object, got {_kind_of(t)}", "bad_event")
            return t

        return cls(tools=_list(m.get("tools"), what + ".tools", tool), groups=_list(m.get("groups"), what + ".groups", group),
                   skills_prompt=m.get("skills_prompt") or "", session_rev=m.get("sessionrev") or 0, deferred=dict(deferred))


@dataclass
class Rejection:
    name: str
    reason: str


_TOOLDEF: dict[str, type | None] = {
    "name": str, "title": str, "description": str, "input_schema": None, "output_schema": None, "groups": list,
    "read_only": bool, "concurrency_safe": bool, "idempotent": bool, "external": bool, "state_injected": bool,
    "durable": bool, "timeout_ms": int, "max_attempts": int, "permission": str, "rule_matcher": str,
    "rule_field": str, "path_base": str, "mcp": dict, "cache_ttl_ms": int, "cache_scope": str, "background": bool,
    "no_background": bool,
}


@dataclass
class ToolDef:
    """A tool definition (7.2) with its defaults; ``to_json`` is what goes into ``P.register.<name>``."""

    name: str
    input_schema: dict[str, Any]
    description: str = ""
    title: str = ""
    output_schema: dict[str, Any] | None = None
    groups: list[str] = field(default_factory=list)
    read_only: bool = False
    concurrency_safe: bool = True
    idempotent: bool = False
    external: bool = False
    state_injected: bool = False
    durable: bool = False
    timeout_ms: int = 300000
    max_attempts: int = 1
    permission: str = "passthrough"
    rule_matcher: str = "none"
    rule_field: str = ""
    path_base: str = ""
    mcp: dict[str, Any] | None = None
    cache_ttl_ms: int = 0
    cache_scope: str = ""
    background: bool = False  # past its timeout a call goes on as a background task (5.10)
    no_background: bool = False  # a call's own background ask is ignored: the timeout holds (5.10, 1.12)

    @classmethod
    def from_json(cls, obj: Any, what: str = "tool") -> ToolDef:
        """Decode strictly (7.4): unknown members and a missing input_schema are refused."""
        m = _check(obj, what, _TOOLDEF, True)
        if m.get("input_schema") is None:
            raise ProtocolError(f"{what}: input_schema is missing", "bad_request")
        if not isinstance(m["input_schema"], dict):
            raise ProtocolError(f"{what}: input_schema must be an object schema", "bad_request")
        kw = {k: v for k, v in m.items() if v is not None}
        d = cls(**kw)
        if not d.timeout_ms or d.timeout_ms <= 0:
            d.timeout_ms = 300000
        if d.max_attempts <= 0:
            d.max_attempts = 1
        d.permission = d.permission or "passthrough"
        d.rule_matcher = d.rule_matcher or "none"
        return d

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.title:
            out["title"] = self.title
        out["description"] = self.description
        out["input_schema"] = self.input_schema
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema
        if self.groups:
            out["groups"] = list(self.groups)
        for k in ("read_only", "concurrency_safe", "idempotent", "external", "state_injected"):
            out[k] = getattr(self, k)
        if self.durable:
            out["durable"] = True
        out["timeout_ms"] = self.timeout_ms
        out["max_attempts"] = self.max_attempts
        out["permission"] = self.permission
        out["rule_matcher"] = self.rule_matcher
        for k in ("rule_field", "path_base"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        if self.mcp is not None:
            out["mcp"] = self.mcp
        if self.cache_ttl_ms:
            out["cache_ttl_ms"] = self.cache_ttl_ms
        if self.cache_scope:
            out["cache_scope"] = self.cache_scope
        if self.background:
            out["background"] = True
        if self.no_background:
            out["no_background"] = True
        return out


@dataclass
class Group:
    """A group definition (7.3), decoded strictly."""

    name: str
    description: str = ""
    instructions: str = ""
    scope: str = "meta"
    active_by_default: bool = False
    activate_on_skill: str = ""
    skills: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any, what: str = "group") -> Group:
        m = _check(obj, what, {f.name: None for f in fields(cls)}, True)
        return cls(**{k: v for k, v in m.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.instructions:
            out["instructions"] = self.instructions
        out["scope"] = self.scope or "meta"
        out["active_by_default"] = self.active_by_default
        if self.activate_on_skill:
            out["activate_on_skill"] = self.activate_on_skill
        if self.skills:
            out["skills"] = list(self.skills)
        return out


@dataclass
class Answer:
    """``io.toolbus.answer`` data (6.3): an external answer or a confirmation."""

    state: str = ""
    output: list[Block] = field(default_factory=list)
    confirmed: bool | None = None
    input_digest: str = ""
    input: Any = None
    rules: list[Rule] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.confirmed is None:
            out["state"] = self.state or "success"
            out["output"] = blocks_json(self.output)
            return out
        out["confirmed"] = self.confirmed
        if self.input_digest:
            out["input_digest"] = self.input_digest
        if self.input is not None:
            out["input"] = self.input
        if self.rules:
            out["rules"] = [r.to_json() for r in self.rules]
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass
class ExternalRequest:
    """A handoff request (6.2): an external call or a confirmation to give."""

    tool: str
    session: str
    reply_id: str
    call: Call
    user: Any = None
    context: Any = None
    subject: str = ""
    expires: str = ""
    input_digest: str = ""
    suggested_rules: list[Rule] = field(default_factory=list)
    reason: str = ""

    @classmethod
    def from_event(cls, e: Any) -> ExternalRequest:
        """Decode an ``io.toolbus.external.request`` or ``io.toolbus.confirm.request`` event."""
        if e.type not in ("io.toolbus.external.request", "io.toolbus.confirm.request"):
            raise ProtocolError(f"expected a handoff request, got {e.type}")
        m = _check(e.data, e.type, {"call": dict, "user": None, "context": None, "subject": str, "expires": str,
                                     "input_digest": str, "suggested_rules": list, "reason": str}, False, "bad_event")
        call = Call.from_json(m.get("call"), e.type + ".call")
        if not (e.sessionid and e.replyid and call.id):
            raise ProtocolError(f"{e.type}: sessionid, replyid and call.id are required")
        return cls(tool=call.name, session=e.sessionid, reply_id=e.replyid, call=call, user=m.get("user"),
                   context=m.get("context"), subject=m.get("subject") or "", expires=m.get("expires") or "",
                   input_digest=m.get("input_digest") or "",
                   suggested_rules=_list(m.get("suggested_rules"), e.type + ".suggested_rules", Rule.from_json),
                   reason=m.get("reason") or "")
