"""``@tool``: tool definitions from Python functions and classes (docs/protocol.md 7.2)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Union

from . import event as ev
from .errors import SchemaError
from .records import Block, ToolDef, to_blocks

_pydantic: Any
try:  # pydantic is optional
    import pydantic as _pydantic
except ImportError:  # pragma: no cover - exercised without the extra
    _pydantic = None


class State(dict):  # type: ignore[type-arg]
    """Annotate a parameter ``State`` to receive the session's agent state (the tool becomes state_injected)."""


@dataclass
class ToolResult:
    """A tool's full result: output blocks, state (success, error, interrupted), metadata, state patch."""

    output: Any = field(default_factory=list)
    state: str = "success"
    metadata: Any = None
    state_patch: Any = None


Handler = Callable[["ToolContext"], Awaitable[Any]]


class ToolContext:
    """One call as a tool sees it: ids, runtime context, state, progress and the state patch."""

    def __init__(self, *, id: str, name: str, session: str, reply_id: str, input: Any, user: Any, context: Any,
                 attempt: int, state: Any, deadline: float | None, progress: Callable[[list[Block]], Awaitable[None]] | None = None) -> None:
        self.id, self.name, self.session, self.reply_id = id, name, session, reply_id
        self.input, self.user, self.context, self.attempt, self.state = input, user, context, attempt, state
        self.deadline = deadline
        self._progress = progress
        self.patch: Any = None

    async def progress(self, output: Any) -> None:
        """Publish ``io.toolbus.call.progress`` (5.3) with text or blocks; seq counts from 1."""
        if self._progress is not None:
            await self._progress(to_blocks(output))

    def patch_state(self, patch: dict[str, Any]) -> None:
        """Set the JSON merge patch (RFC 7386) for the session's agent state (state_injected tools only)."""
        self.patch = patch

    def context_value(self, key: str, default: Any = None) -> Any:
        """A member of the batch's runtime ``context`` object."""
        return self.context.get(key, default) if isinstance(self.context, dict) else default

    @property
    def key(self) -> str:
        return f"{self.session}.{self.reply_id}.{self.id}"


class Tool:
    """A tool definition with its handler; calling it calls the original function."""

    def __init__(self, definition: ToolDef, handler: Handler, fn: Callable[..., Any] | None = None) -> None:
        self.definition = definition
        self.handler = handler
        self._fn = fn
        if fn is not None:
            functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:
            raise TypeError(f"tool {self.name} has no Python function to call")
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


# ---- schemas from type hints ----

_SIMPLE: dict[Any, dict[str, Any]] = {str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"},
                                      bool: {"type": "boolean"}, type(None): {"type": "null"}, Any: {}}


def _is_pydantic(tp: Any) -> bool:
    return _pydantic is not None and isinstance(tp, type) and issubclass(tp, _pydantic.BaseModel)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def schema_of(tp: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of a type hint; raises SchemaError naming where it failed."""
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    s: dict[str, Any]
    if origin is typing.Annotated:
        s = schema_of(args[0], where)
        for meta in args[1:]:
            if isinstance(meta, str):
                s["description"] = meta
        return s
    if origin in (Union, types.UnionType):
        subs = [a for a in args if a is not type(None)]
        nullable = len(subs) < len(args)
        if len(subs) == 1:
            s = schema_of(subs[0], where)
            if nullable:
                if isinstance(s.get("type"), str):
                    s["type"] = [s["type"], "null"]
                else:
                    s = {"anyOf": [s, {"type": "null"}]}
            return s
        return {"anyOf": [schema_of(a, where) for a in args]}
    if origin is Literal:
        vals = list(args)
        s = {"enum": vals}
        kinds = {type(v) for v in vals}
        if len(kinds) == 1 and next(iter(kinds)) in (str, int, bool):
            s["type"] = _SIMPLE[next(iter(kinds))]["type"]
        return s
    if origin in (list, set, frozenset, typing.Sequence, __import__("collections.abc").abc.Sequence) or tp in (list, set):
        item = schema_of(args[0], where + "[]") if args else {}
        return {"type": "array", "items": item}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0], where + "[]")}
        return {"type": "array", "prefixItems": [schema_of(a, where + "[]") for a in args], "minItems": len(args), "maxItems": len(args)}
    if origin in (dict, typing.Mapping, __import__("collections.abc").abc.Mapping) or tp is dict:
        if args and args[0] is not str:
            raise SchemaError(f"{where}: a dict's keys must be str (JSON object keys), not {args[0]!r}")
        return {"type": "object", "additionalProperties": schema_of(args[1], where + "{}")} if args else {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        vals = [m.value for m in tp]
        s = {"enum": vals}
        kinds = {type(v) for v in vals}
        if len(kinds) == 1 and next(iter(kinds)) in (str, int):
            s["type"] = _SIMPLE[next(iter(kinds))]["type"]
        return s
    if _is_pydantic(tp):
        out: dict[str, Any] = tp.model_json_schema()
        return out
    if _is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        props = {k: schema_of(v, f"{where}.{k}") for k, v in hints.items()}
        s = {"type": "object", "properties": props}
        req = [k for k in hints if k in tp.__required_keys__]
        if req:
            s["required"] = req
        return s
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp, include_extras=True)
        props, req = {}, []
        for f in dataclasses.fields(tp):
            props[f.name] = schema_of(hints.get(f.name, f.type), f"{where}.{f.name}")
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                req.append(f.name)
        s = {"type": "object", "properties": props}
        if req:
            s["required"] = req
        return s
    raise SchemaError(f"{where}: cannot derive a JSON schema from type {tp!r}; use str, int, float, bool, list, dict, "
                      "Literal, Enum, a dataclass, a TypedDict or a pydantic model")


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|Attributes)\s*:\s*$")
_ARG = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A Google-style docstring's description and its ``Args:`` descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section = ""
    current = ""
    indent = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section, current, indent = m.group(1), "", None
            continue
        if not section:
            desc.append(line)
            continue
        if section in ("Args", "Arguments", "Parameters", "Params"):
            am = _ARG.match(line)
            if am and (indent is None or len(am.group(1)) <= indent):
                indent = len(am.group(1))
                current = am.group(2).lstrip("*")
                args[current] = am.group(4).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), args


def _injected(tp: Any) -> str | None:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _injected(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):  # Optional[ToolContext] (3.10 adds it for a None default)
        subs = [a for a in typing.get_args(tp) if a is not type(None)]
        return _injected(subs[0]) if len(subs) == 1 else None
    if tp is ToolContext or tp == "ToolContext":
        return "ctx"
    if tp is State or tp == "State":
        return "state"
    return None


_AS_IS = frozenset((str, int, bool, dict, list))  # types whose JSON values _convert passes through


def _convert(tp: Any, v: Any) -> Any:
    if v is None or tp is Any or (type(tp) is type and tp in _AS_IS):
        return v
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _convert(typing.get_args(tp)[0], v)
    if origin in (Union, types.UnionType):
        subs = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(subs[0], v) if len(subs) == 1 else v
    if _is_pydantic(tp):
        return tp.model_validate(v)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(v)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and isinstance(v, dict):
        hints = typing.get_type_hints(tp)
        return tp(**{k: _convert(hints.get(k, Any), x) for k, x in v.items()})
    if tp is float and isinstance(v, int):
        return float(v)
    if origin is list and isinstance(v, list) and typing.get_args(tp):
        return [_convert(typing.get_args(tp)[0], x) for x in v]
    return v


def _build(fn: Callable[..., Any], *, name: str | None, description: str | None, skip_first: bool, opts: dict[str, Any],
           localns: dict[str, Any] | None = None) -> Tool:
    label = getattr(fn, "__qualname__", repr(fn))
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, localns=localns, include_extras=True)
    except (NameError, TypeError) as err:
        raise SchemaError(f"tool {label}: cannot read its type hints: {err}") from None
    doc_desc, doc_args = parse_docstring(inspect.getdoc(fn))
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    props: dict[str, Any] = {}
    required: list[str] = []
    plan: list[tuple[str, str, Any]] = []  # (parameter, kind: arg|ctx|state|model, type)
    state_injected = False
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SchemaError(f"tool {label}: parameter *{p.name} cannot be described; name every parameter")
        if p.name not in hints:
            raise SchemaError(f"tool {label}: parameter {p.name!r} has no type hint, so its schema cannot be derived")
        tp = hints[p.name]
        inj = _injected(tp)
        if inj:
            plan.append((p.name, inj, tp))
            state_injected |= inj == "state"
            continue
        s = schema_of(tp, f"tool {label}: parameter {p.name!r}")
        if p.name in doc_args and doc_args[p.name] and "description" not in s:
            s["description"] = doc_args[p.name]
        if p.default is not inspect.Parameter.empty:
            try:
                ev.dumps(p.default.value if isinstance(p.default, enum.Enum) else p.default)
                s.setdefault("default", p.default.value if isinstance(p.default, enum.Enum) else p.default)
            except (TypeError, ValueError):
                pass
        else:
            required.append(p.name)
        props[p.name] = s
        plan.append((p.name, "arg", tp))
    args_plan = [x for x in plan if x[1] == "arg"]
    whole_model = len(args_plan) == 1 and _is_pydantic(args_plan[0][2])
    if whole_model:
        schema = args_plan[0][2].model_json_schema()
        plan = [(n, "model" if k == "arg" else k, t) for n, k, t in plan]
    else:
        schema = {"type": "object", "properties": props, "additionalProperties": False}
        if required:
            schema["required"] = required
    tool_name = name or fn.__name__
    if not ev.valid_name(tool_name):
        raise SchemaError(f"tool name {tool_name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    timeout = opts.pop("timeout", None)
    cache_ttl = opts.pop("cache_ttl", None)
    opts["state_injected"] = opts.get("state_injected") or state_injected
    definition = ToolDef(name=tool_name, input_schema=schema, description=description if description is not None else doc_desc,
                         timeout_ms=int(timeout * 1000) if timeout else 300000,
                         cache_ttl_ms=int(cache_ttl * 1000) if cache_ttl else 0, **opts)
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))

    async def handler(ctx: ToolContext) -> Any:
        inp = ctx.input if isinstance(ctx.input, dict) else {}
        kwargs: dict[str, Any] = {}
        for pname, kind, tp in plan:
            if kind == "ctx":
                kwargs[pname] = ctx
            elif kind == "state":
                kwargs[pname] = State(ctx.state if isinstance(ctx.state, dict) else {})
            elif kind == "model":
                kwargs[pname] = tp.model_validate(inp)
            elif pname in inp:
                kwargs[pname] = _convert(tp, inp[pname])
        if is_async:
            return await fn(**kwargs)
        return await asyncio.to_thread(functools.partial(fn, **kwargs))

    return Tool(definition, handler, fn)




def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def tool(fn: Any = None, /, name: str | None = None, description: str | None = None, *, read_only: bool = False,
         concurrency_safe: bool = True, idempotent: bool = False, external: bool = False, durable: bool = False,
         timeout: float | None = None, max_attempts: int = 1, permission: str = "passthrough", rule_matcher: str = "none",
         rule_field: str = "", groups: typing.Sequence[str] = (), title: str = "", output_schema: dict[str, Any] | None = None,
         path_base: str = "", cache_ttl: float | None = None, cache_scope: str = "", state_injected: bool = False,
         background: bool = False, no_background: bool = False) -> Any:
    """Make a function (async or sync) or a class (its ``__call__``) a tool; see python/API.md.

    The schema comes from the type hints, the description and parameter texts from the Google
    docstring; parameters annotated ToolContext or State are injected and left out of the schema.
    Raises SchemaError at decoration time when a schema cannot be derived.
    """
    caller = sys._getframe(1).f_locals  # so that string annotations may name the caller's local types
    opts = dict(read_only=read_only, concurrency_safe=concurrency_safe, idempotent=idempotent, external=external,
                durable=durable, timeout=timeout, max_attempts=max_attempts, permission=permission, rule_matcher=rule_matcher,
                rule_field=rule_field, groups=list(groups), title=title, output_schema=output_schema, path_base=path_base,
                cache_ttl=cache_ttl, cache_scope=cache_scope, state_injected=state_injected, background=background,
                no_background=no_background)

    def wrap(f: Any) -> Any:
        if isinstance(f, type):
            call = getattr(f, "__call__", None)
            if call is None or call is object.__call__:
                raise SchemaError(f"class {f.__qualname__}: a tool class needs a __call__ method")
            desc = description if description is not None else parse_docstring(inspect.getdoc(f))[0] or None
            proto = _build(call, name=name or _snake(f.__name__), description=desc, skip_first=True, opts=dict(opts), localns=caller)
            setattr(f, "__toolbus_tool__", proto)
            return f
        if not callable(f):
            raise SchemaError(f"@tool needs a function or a class, not {type(f).__name__}")
        return _build(f, name=name, description=description, skip_first=False, opts=dict(opts), localns=caller)

    if fn is not None:
        return wrap(fn)
    return wrap


def tools_of(obj: Any) -> list[Tool]:
    """The tools an object stands for: a Tool, a @tool class or instance, or a module/object holding Tools."""
    if isinstance(obj, Tool):
        return [obj]
    proto = getattr(type(obj) if not isinstance(obj, type) else obj, "__toolbus_tool__", None)
    if isinstance(proto, Tool):
        inst = obj() if isinstance(obj, type) else obj
        keep = ("read_only", "concurrency_safe", "idempotent", "external", "durable", "max_attempts", "permission",
                "rule_matcher", "rule_field", "groups", "title", "output_schema", "path_base", "cache_scope", "state_injected",
                "background", "no_background")
        bound = _build(inst.__call__, name=proto.name, description=proto.definition.description, skip_first=False,
                       opts={k: getattr(proto.definition, k) for k in keep})
        bound.definition = proto.definition  # the class's own (timeouts and all)
        return [bound]
    if callable(obj) and not isinstance(obj, type):
        return [tool(obj)]
    found = [v for v in vars(obj).values() if isinstance(v, Tool)] if hasattr(obj, "__dict__") else []
    if not found:
        raise TypeError(f"{obj!r} is not a tool: decorate it with @toolbus.tool")
    return found
