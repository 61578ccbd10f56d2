"""The wire without a router: CloudEvents both modes, strict records, schemas, and Go's golden model files."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Literal, Optional, TypedDict

import pytest

import toolbus
from toolbus import event as ev
from toolbus.model import parse_model_turn
from toolbus.offload import head_tail
from toolbus.records import Block, Parked, Result, ResultError, Rule

MODEL = Path(__file__).resolve().parents[2] / "client" / "testdata" / "model"


STORED_DIGEST = "0f" * 32
STORED_URL = "nats-object://toolbus_outputs/s1.t.c.x.0#sha256=" + STORED_DIGEST
HEAD_TAIL = Path(__file__).resolve().parents[2] / "bus" / "offload" / "testdata" / "headtail.json"


@pytest.mark.parametrize("case", json.loads(HEAD_TAIL.read_text(encoding="utf-8")), ids=lambda c: c["name"])
def test_stored_text_preview_matches_go(case):
    """A stored text's inline preview is Go's headTail byte for byte (bus/offload/testdata/headtail.json)."""
    assert head_tail(case["text"], case["keep"], case["url"]).encode() == case["want"].encode()


def turn_results(t):
    """The same results as client/model_test.go's turnResults, by position."""
    ids = [c.id for c in t.calls]
    invalid = "Input validation failed for tool 'get_weather':\n/: expected an object (or a string holding one)"
    results = [
        Result(ids[0], "get_weather", "success", [Block.text_block("4°C, rain")]),
        Result(ids[1], "get_weather", "error", [Block.text_block(invalid)], ResultError("invalid_input", invalid)),
        Result(ids[2], "screenshot", "success", [Block.text_block("The login page."), Block("data", media_type="image/png", data="iVBORw0KGgo=")]),
        Result(ids[3], "read_log", "success", [
            Block.text_block("2026-12-01 10:00 start\n[… 20971477 bytes left out …]\n2026-12-01 18:00 stop\n[The whole text, 20971520 bytes "
                             f"(sha256 {STORED_DIGEST}), is too large to show here: above are its first 22 and last 21 bytes. It is stored as "
                             f"{STORED_URL}; read_output reads any part of it.]"),
            Block("data", media_type="text/plain; charset=utf-8", url=STORED_URL, size=20971520),
            Block("data", media_type="image/png", url="nats-object://toolbus_outputs/s1.t.c.x.1#sha256=" + "ab" * 32, size=3145728)]),
    ]
    parked = [Parked(ids[4], "deploy", {"env": "prod"}, "confirm", "toolbus.answer.deploy", [Rule("deploy", behavior="allow")])]
    return results, parked


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "gemini"])
def test_model_turn_matches_go_golden_files(fmt):
    t = parse_model_turn(fmt, (MODEL / f"{fmt}.in.json").read_bytes())
    calls = json.loads((MODEL / f"{fmt}.calls.json").read_text())["calls"]
    assert [c.to_json() for c in t.calls] == calls
    results, parked = turn_results(t)
    reply = t.reply(results, parked)
    assert reply.messages == json.loads((MODEL / f"{fmt}.out.json").read_text())
    assert [p.id for p in reply.parked] == [t.calls[4].id]


def test_model_turn_errors():
    with pytest.raises(toolbus.NoToolCallsError):
        parse_model_turn("openai", {"role": "assistant", "content": "hi"})
    with pytest.raises(toolbus.ProtocolError, match="unknown model format"):
        parse_model_turn("cohere", {})
    with pytest.raises(toolbus.ProtocolError, match="appears twice"):
        parse_model_turn("anthropic", [{"type": "tool_use", "id": "a", "name": "x"}] * 2)
    with pytest.raises(toolbus.ProtocolError, match="not JSON"):
        parse_model_turn("openai", "{")


def test_structured_roundtrip_and_go_order():
    e = ev.Event(ev.TYPE_CALL_BATCH, "me", {"calls": []}, sessionid="s1", replyid="r1", subject="c1")
    body, headers = ev.encode_structured(e)
    assert headers == {"content-type": "application/cloudevents+json"}
    assert list(json.loads(body)) == ["specversion", "id", "source", "type", "subject", "datacontenttype", "time",
                                      "sessionid", "replyid", "data"]
    assert ev.decode(body, headers) == e


def test_binary_roundtrip_and_escaping():
    e = ev.Event(ev.TYPE_EXEC_RESULT, "toolbus/worker/w 1 ü", {"state": "success", "output": []}, sessionid="s1", toolcallid="c1")
    body, h = ev.encode_binary(e)
    assert h["ce-source"] == "toolbus%2Fworker%2Fw%201%20%C3%BC"  # as Go's url.PathEscape and h["content-type"] == "application/json"
    assert ev.decode(body, h) == e


@pytest.mark.parametrize("body,headers,message", [
    (b"", None, "not a JSON CloudEvent"),
    (b"[1]", None, "not a JSON CloudEvent"),
    (b'{"specversion": "0.3", "id": "1", "source": "s", "type": "t"}', None, "specversion"),
    (b'{"specversion": "1.0", "id": "", "source": "s", "type": "t"}', None, "id is empty"),
    (b'{"specversion": "1.0", "id": 5, "source": "s", "type": "t"}', None, "must be a string"),
    (b'{"specversion": "1.0", "id": "1", "source": "s", "type": "t", "sessionid": "a.b"}', None, "sessionid"),
    (b'{"specversion": "1.0", "id": "1", "source": "s", "type": "t", "time": "yesterday"}', None, "RFC 3339"),
    (b'{"specversion": "1.0", "id": "1", "source": "s", "type": "t", "datacontenttype": "text/plain"}', None, "datacontenttype"),
    (b'{"specversion": "1.0", "id": "1", "source": "s", "type": "t", "data": 1, "data_base64": "MQ=="}', None, "both set"),
    (b"{}", {"ce-specversion": "1.0", "ce-id": "1", "Ce-Id": "2", "ce-source": "s", "ce-type": "t"}, "given twice"),
    (b"{}", {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "%ff", "ce-type": "t"}, "not UTF-8"),
    (b"{}", {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "%zz", "ce-type": "t"}, "invalid URL escape"),
    (b"nope", {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s", "ce-type": "t"}, "binary-mode data is not JSON"),
])
def test_decode_refuses(body, headers, message):
    with pytest.raises(toolbus.ProtocolError, match=message) as ei:
        ev.decode(body, headers)
    assert ei.value.code == "bad_event"


def test_decode_accepts_lenient_forms():
    e = ev.decode(b'{"specversion":"1.0","id":"1","source":"s","type":"t","data_base64":"eyJhIjoxfQ==","unknownext":"x"}')
    assert e.data == {"a": 1}
    e = ev.decode(b"", {"ce-specversion": "1.0", "ce-id": "1", "CE-ID": "1", "ce-source": "s", "ce-type": "t"})
    assert e.id == "1" and e.data is None


def test_strict_records():
    with pytest.raises(toolbus.ProtocolError, match=r'request.external_tools\[0\]: unknown member "parameters"'):
        toolbus.Request.from_json({"external_tools": [{"name": "x", "description": "", "parameters": {}}]})
    with pytest.raises(toolbus.ProtocolError, match='member "timeout_ms" must be a number, got string'):
        toolbus.ToolDef.from_json({"name": "x", "input_schema": {"type": "object"}, "timeout_ms": "1"})
    with pytest.raises(toolbus.ProtocolError, match="input_schema is missing"):
        toolbus.ToolDef.from_json({"name": "x", "input_schema": None})
    with pytest.raises(toolbus.ProtocolError, match='unknown member "tools"'):
        toolbus.Group.from_json({"name": "g", "tools": []})
    # Replies are lenient about unknown members, strict about types.
    r = toolbus.Reply.from_json({"results": [{"id": "c", "name": "n", "state": "success", "output": [], "new": 1}], "parked": []})
    assert r.results[0].ok
    # A parked call listed without its input (1.19, protocol 3.2) reads as one with no input.
    r = toolbus.Reply.from_json({"results": [], "parked": [{"id": "c", "name": "ask", "input_omitted": True,
                                                            "input_digest": "sha256:00", "kind": "external",
                                                            "subject": "toolbus.answer.ask"}]})
    assert r.parked[0].id == "c" and r.parked[0].input is None
    with pytest.raises(toolbus.ProtocolError):
        toolbus.Reply.from_json({"results": "nope"})
    assert toolbus.ToolDef.from_json({"name": "x", "input_schema": {"type": "object"}, "timeout_ms": 1.0}).timeout_ms == 1


def test_no_background_round_trip():
    # 1.12: a tool's author refuses a call's background ask (protocol 7.2).
    d = toolbus.ToolDef.from_json({"name": "x", "input_schema": {"type": "object"}, "no_background": True})
    assert d.no_background and d.to_json()["no_background"] is True
    assert "no_background" not in toolbus.ToolDef(name="y", input_schema={"type": "object"}).to_json()

    @toolbus.tool(no_background=True)
    def strict(a: int) -> int:
        """Add nothing."""
        return a
    assert strict.definition.no_background


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    w: float
    label: str = ""


def test_schema_from_hints_and_docstring():
    @toolbus.tool(read_only=True, timeout=2.5)
    def paint(color: Color, at: Point, boxes: list[Box], mode: Literal["fast", "slow"] = "fast",
              note: Optional[str] = None, tags: dict[str, int] | None = None, ctx: toolbus.ToolContext = None) -> str:  # type: ignore[assignment]
        """Paint something.

        More words here.

        Args:
            color: which color
            at: where, as a point
                on the canvas
            boxes: the boxes
        Returns:
            nothing useful
        """
        return ""

    d = paint.definition
    assert d.description == "Paint something.\n\nMore words here." and d.timeout_ms == 2500 and d.read_only
    p = d.input_schema["properties"]
    assert p["color"] == {"enum": ["red", "blue"], "type": "string", "description": "which color"}
    assert p["at"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert p["at"]["description"] == "where, as a point on the canvas"
    assert p["boxes"]["items"] == {"type": "object", "properties": {"w": {"type": "number"}, "label": {"type": "string"}}, "required": ["w"]}
    assert p["mode"] == {"enum": ["fast", "slow"], "type": "string", "default": "fast"}
    assert p["note"] == {"type": ["string", "null"], "default": None}
    assert p["tags"] == {"type": ["object", "null"], "additionalProperties": {"type": "integer"}, "default": None}
    assert "ctx" not in p and d.input_schema["required"] == ["color", "at", "boxes"]
    assert d.input_schema["additionalProperties"] is False


def test_pydantic_model_is_the_whole_input():
    pydantic = pytest.importorskip("pydantic")

    class Query(pydantic.BaseModel):
        city: str
        days: int = 1

    @toolbus.tool
    async def weather(q: Query) -> str:
        return f"{q.city} {q.days}"

    assert weather.definition.input_schema["properties"]["city"] == {"title": "City", "type": "string"}


def test_class_tool():
    @toolbus.tool(read_only=True)
    class WordCount:
        """Count words."""

        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self, text: str) -> str:
            self.calls += 1
            return str(len(text.split()))

    from toolbus.tool import tools_of

    (t,) = tools_of(WordCount)
    assert t.name == "word_count" and t.definition.description == "Count words." and t.definition.read_only
    assert list(t.definition.input_schema["properties"]) == ["text"]
