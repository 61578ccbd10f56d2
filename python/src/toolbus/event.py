"""CloudEvents on the bus (docs/protocol.md 1): structured and binary mode, identifiers, subjects."""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import json
import re
import time as _time
from dataclasses import dataclass
from typing import Any, Mapping

from nats.nuid import NUID

from .errors import ProtocolError

# Event types (docs/protocol.md 2).
TYPE_CALL_BATCH = "io.toolbus.call.batch"
TYPE_CALL_REPLY = "io.toolbus.call.reply"
TYPE_TOOLS_QUERY = "io.toolbus.tools.query"
TYPE_TOOLS_LIST = "io.toolbus.tools.list"
TYPE_CALL_CANCEL = "io.toolbus.call.cancel"
TYPE_CALL_RESULT = "io.toolbus.call.result"
TYPE_CALL_PROGRESS = "io.toolbus.call.progress"
MAX_PROGRESS = 64 << 10  # the most bytes of a progress message's body a router takes (5.3, 1.19)
TYPE_CALL_PARKED = "io.toolbus.call.parked"
TYPE_CALL_RUNNING = "io.toolbus.call.running"  # a router's notice on the batch's reply + ".running" (3.2.1, 1.25)
TYPE_BATCH_DONE = "io.toolbus.batch.done"
TYPE_EXEC = "io.toolbus.exec"
TYPE_EXEC_RESULT = "io.toolbus.exec.result"
TYPE_EXEC_RECORDED = "io.toolbus.exec.recorded"
TYPE_EXTERNAL_REQUEST = "io.toolbus.external.request"
TYPE_CONFIRM_REQUEST = "io.toolbus.confirm.request"
TYPE_ANSWER = "io.toolbus.answer"
TYPE_ANSWER_ACK = "io.toolbus.answer.ack"
TYPE_REGISTER = "io.toolbus.register"
TYPE_REGISTER_ACK = "io.toolbus.register.ack"
TYPE_ADMIN = "io.toolbus.admin"
TYPE_ADMIN_REPLY = "io.toolbus.admin.reply"
TYPE_ERROR = "io.toolbus.error"
TYPE_REPLAY = "io.toolbus.events.replay"
TYPE_REPLAY_READY = "io.toolbus.events.replay.ready"
TYPE_HANDOFF_FOLLOW = "io.toolbus.handoff.follow"
TYPE_HANDOFF_READY = "io.toolbus.handoff.ready"
TYPE_CONSUMER_NEXT = "io.toolbus.consumer.next"
TYPE_CONSUMER_STOP = "io.toolbus.consumer.stop"
TYPE_OUTPUT_GET = "io.toolbus.output.get"
TYPE_OUTPUT_CHUNK = "io.toolbus.output.chunk"
TYPE_TASK_QUERY = "io.toolbus.task.query"
TYPE_TASK_REPLY = "io.toolbus.task.reply"
TYPE_TASK_DONE = "io.toolbus.task.done"

SPEC_VERSION = "1.0"
CONTENT_TYPE_EVENT = "application/cloudevents+json"
CONTENT_TYPE_JSON = "application/json"

# Error codes (docs/protocol.md 1, 3.3).
CODE_BAD_EVENT = "bad_event"
CODE_BAD_REQUEST = "bad_request"
CODE_UNKNOWN_TOOL = "unknown_tool"
CODE_INACTIVE_TOOL = "inactive_tool"
CODE_INVALID_INPUT = "invalid_input"
CODE_DENIED = "denied"
CODE_UNAVAILABLE = "unavailable"
CODE_TIMEOUT = "timeout"
CODE_TOOL_ERROR = "tool_error"
CODE_UNKNOWN_OUTCOME = "unknown_outcome"
CODE_INTERRUPTED = "interrupted"
CODE_NOT_PARKED = "not_parked"
CODE_ALREADY_ANSWERED = "already_answered"
CODE_INTERNAL = "internal"
CODE_LIMIT_EXCEEDED = "limit_exceeded"
CODE_BUSY = "busy"

STATE_SUCCESS = "success"
STATE_ERROR = "error"
STATE_INTERRUPTED = "interrupted"
STATE_DENIED = "denied"

KIND_EXTERNAL = "external"
KIND_CONFIRM = "confirm"
KIND_QUEUED = "queued"

FORMATS = ("toolbus", "openai", "openai-responses", "anthropic", "gemini", "mcp")
MAX_CALLS = 64
MAX_CANCEL_CALLS = 1024  # ids one cancel may name (3.5); a cancel naming more is dropped whole
DEFAULT_HEARTBEAT = 5.0
DEFAULT_TIMEOUT_MS = 300000
INTERRUPTED_TEXT = "<system-reminder>The tool call has been interrupted by the user.</system-reminder>"

# Matched whole (fullmatch): a trailing newline is no match.
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# RFC 3339 with the ranges Go's time.RFC3339Nano checks (month, day 1-31, hour, minute, second, zone), ASCII digits.
_RFC3339 = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"
                      r"(\.[0-9]+)?(?:Z|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))")


def valid_id(s: object) -> bool:
    """Session, reply, call and worker ids: ``^[A-Za-z0-9_-]{1,128}$``."""
    return isinstance(s, str) and _ID.fullmatch(s) is not None


def valid_name(s: object) -> bool:
    """Tool and group names: ``^[A-Za-z0-9_-]{1,64}$``."""
    return isinstance(s, str) and _NAME.fullmatch(s) is not None


def valid_time(s: str) -> bool:
    """Whether s is an RFC 3339 time as Go's time.RFC3339Nano parses it."""
    m = _RFC3339.fullmatch(s)
    return m is not None and _day_exists(m)


def _day_exists(m: re.Match[str]) -> bool:
    """Whether the day of a matched time is in its month (February 30 is no date; the pattern allows 1-31)."""
    day = int(m[3])
    return day <= 28 or day <= calendar.monthrange(int(m[1]), int(m[2]))[1]


_last_stamp: tuple[int, str] = (-1, "")


def now() -> str:
    """The current time in UTC with millisecond precision, as toolbus stamps ``time``."""
    global _last_stamp
    ms = int(_time.time() * 1000)
    if _last_stamp[0] == ms:
        return _last_stamp[1]
    s = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
    _last_stamp = (ms, s)
    return s


def rfc3339(ts: float) -> str:
    """A unix time as RFC 3339 in UTC with nanosecond digits trimmed to microseconds."""
    us = int(round((ts % 1) * 1e6))
    if us == 1000000:
        ts, us = ts + 1, 0
    return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(int(ts))) + f".{us:06d}Z"


def parse_time(s: str) -> float:
    """An RFC 3339 time as a unix timestamp (float seconds)."""
    m = _RFC3339.fullmatch(s)
    if m is None or not _day_exists(m):
        raise ProtocolError(f"time {_q(s)} is not RFC 3339")
    y, mo, d, h, mi, sec, frac, sign, zh, zm = m.groups()
    ts = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(sec), 0, 0, 0))
    if sign:
        off = int(zh) * 3600 + int(zm) * 60
        ts -= off if sign == "+" else -off
    return ts + (float(frac) if frac else 0.0)


def _q(v: object) -> str:
    """A string quoted as Go's %q quotes it (for texts that must read the same from either SDK)."""
    return json.dumps(v, ensure_ascii=False)


_nuid = NUID()


def new_id() -> str:
    """A fresh event id (a NATS NUID, as the Go SDK uses)."""
    return _nuid.next().decode()


def input_digest(value: Any) -> str:
    """``sha256:<hex>`` of a call input's compact JSON (docs/protocol.md 6.2)."""
    raw = value if isinstance(value, (bytes, bytearray)) else dumps(value)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def dumps(value: Any) -> bytes:
    """Compact JSON as the Go SDK writes it (UTF-8, no NaN)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


_ATTRS = (
    "subject", "datacontenttype", "time", "sessionid", "replyid", "toolcallid",
    "traceparent", "tracestate", "expirytime",
)  # fmt: skip


@dataclass
class Event:
    """One CloudEvent 1.0. ``data`` is the decoded JSON value (``None``: absent)."""

    type: str
    source: str
    data: Any = None
    id: str = ""
    sessionid: str = ""
    replyid: str = ""
    toolcallid: str = ""
    subject: str = ""
    time: str = ""
    expirytime: str = ""
    traceparent: str = ""
    tracestate: str = ""
    datacontenttype: str = CONTENT_TYPE_JSON
    specversion: str = SPEC_VERSION

    def __post_init__(self) -> None:
        if not self.id:
            self.id = new_id()
        if not self.time:
            self.time = now()

    def validate(self) -> None:
        """Check the attributes as a receiver must (docs/protocol.md 1); raises ProtocolError."""
        if self.specversion != SPEC_VERSION:
            raise ProtocolError(f'specversion must be "1.0", got {_q(self.specversion)}')
        for name in ("id", "source", "type"):
            if not getattr(self, name):
                raise ProtocolError(f"{name} is empty")
        if self.datacontenttype not in ("", CONTENT_TYPE_JSON) and not _is_json_type(self.datacontenttype):
            raise ProtocolError(f"datacontenttype must be application/json, got {_q(self.datacontenttype)}")
        for name in ("sessionid", "replyid", "toolcallid"):
            v = getattr(self, name)
            if v and not valid_id(v):
                raise ProtocolError(f"{name} {_q(v)} must match ^[A-Za-z0-9_-]{{1,128}}$")
        if self.time and not valid_time(self.time):
            raise ProtocolError(f"time {_q(self.time)} is not RFC 3339")
        if self.expirytime and not valid_time(self.expirytime):
            raise ProtocolError(f"expirytime {_q(self.expirytime)} is not RFC 3339")

    def expiry(self) -> float | None:
        """The ``expirytime`` as a unix time, or None."""
        return parse_time(self.expirytime) if self.expirytime else None

    def to_dict(self) -> dict[str, Any]:
        """The structured-mode JSON object, members in the Go SDK's order."""
        out: dict[str, Any] = {"specversion": self.specversion, "id": self.id, "source": self.source, "type": self.type}
        for name in _ATTRS:
            v = getattr(self, name)
            if v:
                out[name] = v
        if self.data is not None:
            out["data"] = self.data
        return out


def _is_json_type(ct: str) -> bool:
    mt = ct.split(";", 1)[0].strip().lower()
    return mt == CONTENT_TYPE_JSON or mt.endswith("+json") or mt == "text/json"


def encode_structured(e: Event) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a structured-mode message (docs/protocol.md 1)."""
    body = dumps(e.to_dict())
    headers = {"content-type": CONTENT_TYPE_EVENT}
    if e.traceparent:
        headers["traceparent"] = e.traceparent
        if e.tracestate:
            headers["tracestate"] = e.tracestate
    return body, headers


_SAFE = re.compile(r"^[A-Za-z0-9\-_.:/+~]*$")
_PATH_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~$&+:=@")


def _header_value(v: str) -> str:
    if _SAFE.match(v):
        return v
    return "".join(chr(b) if b in _PATH_KEEP else f"%{b:02X}" for b in v.encode())


def encode_binary(e: Event) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a binary-mode message: attributes as ``ce-`` headers."""
    h: dict[str, str] = {}
    for name in ("specversion", "id", "source", "type", "subject", "time", "sessionid", "replyid",
                 "toolcallid", "traceparent", "tracestate", "expirytime"):
        v = getattr(e, name)
        if v:
            h["ce-" + name] = _header_value(v)
    h["content-type"] = _header_value(e.datacontenttype or CONTENT_TYPE_JSON)
    if e.traceparent:
        h["traceparent"] = _header_value(e.traceparent)
        if e.tracestate:
            h["tracestate"] = _header_value(e.tracestate)
    body = b"" if e.data is None else dumps(e.data)
    return body, h


def encode_compact(e: Event) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a compact-form message (docs/protocol.md 5.2, 1.16): only the four
    attributes CloudEvents requires; the request's own inbox says which call a result answers."""
    h = {"ce-" + name: _header_value(getattr(e, name)) for name in ("specversion", "id", "source", "type")}
    return b"" if e.data is None else dumps(e.data), h


def is_compact(headers: Mapping[str, str] | None, e: Event) -> bool:
    """Whether a decoded message came in the compact form (5.1): binary mode without a content type."""
    return not e.datacontenttype and is_binary(headers)


def is_binary(headers: Mapping[str, str] | None) -> bool:
    """Whether a message carries its attributes as ``ce-`` headers."""
    for k in headers or ():
        if len(k) > 3 and k[:3].lower() == "ce-":
            return True
    return False


def decode(data: bytes, headers: Mapping[str, str] | None = None) -> Event:
    """Decode a message in either mode; raises ProtocolError (code bad_event)."""
    if is_binary(headers):
        assert headers is not None
        return _decode_binary(headers, data)
    return decode_structured(data)


def decode_structured(data: bytes) -> Event:
    """Decode a structured-mode CloudEvent."""
    b = data.strip()
    if not b or b[:1] != b"{":
        raise ProtocolError("message is not a JSON CloudEvent")
    try:
        obj = json.loads(b)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:  # RecursionError: nested past the stack
        raise ProtocolError(f"message is not a CloudEvent: {_unreadable(err)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("message is not a JSON CloudEvent")
    kw: dict[str, Any] = {}
    for name in ("specversion", "id", "source", "type", *_ATTRS, "data_base64"):
        v = obj.get(name)
        if v is None:
            continue
        if not isinstance(v, str):
            raise ProtocolError(f"message is not a CloudEvent: attribute {name} must be a string")
        kw[name] = v
    value = obj.get("data")
    b64 = kw.pop("data_base64", "")
    if b64:
        if "data" in obj:
            raise ProtocolError("data and data_base64 are both set")
        try:
            raw = base64.b64decode(b64, validate=True)
            value = json.loads(raw) if raw.strip() else None
        except (binascii.Error, ValueError, RecursionError) as err:
            raise ProtocolError(f"data_base64: {_unreadable(err)}") from None
    return _decoded(kw, value)


def _unreadable(err: Exception) -> str:
    """Why valid JSON may still not be read here: nested deeper than Python's stack, an integer past
    ``sys.get_int_max_str_digits`` (both kept: raising them would let a sender spend the process's stack or CPU)."""
    return "nested too deeply for Python" if isinstance(err, RecursionError) else str(err)


_UNSET = dict.fromkeys(("specversion", "id", "source", "type", *_ATTRS), "")


def _decoded(attrs: dict[str, str], data: Any) -> Event:
    """A received event, validated: the attributes it had, the others empty (no fresh id nor time:
    ``__post_init__`` is for new events, and so not run)."""
    e = object.__new__(Event)
    e.__dict__.update(_UNSET)
    e.__dict__.update(attrs)
    e.data = data
    e.validate()
    return e


def _unescape(v: str, key: str) -> str:
    out = bytearray()
    raw = v.encode("utf-8", "surrogateescape")
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == 0x25:  # %
            hexd = raw[i + 1 : i + 3]
            if len(hexd) != 2 or not all(ch in b"0123456789abcdefABCDEF" for ch in hexd):
                raise ProtocolError(f"header {key}: invalid URL escape {_q(raw[i:i + 3].decode(errors='replace'))}")
            out.append(int(hexd, 16))
            i += 3
        else:
            out.append(c)
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"header {key} is not UTF-8") from None


def _decode_binary(headers: Mapping[str, str], body: bytes) -> Event:
    seen: dict[str, tuple[str, str]] = {}
    for k, v in headers.items():
        if isinstance(v, list):  # some clients hand several values
            v = v[0] if v else ""
        raw, lk = v, k.lower()
        if lk == "content-type":
            name = "datacontenttype"
        elif lk.startswith("ce-"):
            name = lk[3:]
            if "%" in v:
                v = _unescape(v, k)
        else:
            continue
        if not v.isascii():
            # nats-py decodes header bytes that are not UTF-8 as U+FFFD: one there as received may
            # be such bytes, so it is refused (toolbus senders percent-encode every non-ASCII byte).
            if "\ufffd" in raw:
                raise ProtocolError(f"header {k} is not UTF-8")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ProtocolError(f"header {k} is not UTF-8") from None
        if name in seen:
            if seen[name][1] != v:
                a, b = sorted((seen[name][0], k))
                raise ProtocolError(f"attribute {name} is given twice with different values, by headers {a} and {b}")
            continue
        seen[name] = (k, v)
    value: Any = None
    if body.strip():
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise ProtocolError(f"binary-mode data is not JSON: {_unreadable(err)}") from None
    return _decoded({n: v for n, (_, v) in seen.items() if n in _UNSET}, value)


class Subjects:
    """The subjects and names of one deployment (docs/protocol.md 2)."""

    def __init__(self, prefix: str = "toolbus") -> None:
        self.prefix = prefix or "toolbus"
        self._p = self.prefix + "."

    def call(self, session: str) -> str: return self._p + "call." + session  # noqa: E704
    def tools(self, session: str) -> str: return self._p + "tools." + session  # noqa: E704
    def cancel(self, session: str) -> str: return self._p + "cancel." + session  # noqa: E704
    def events(self, session: str) -> str: return self._p + "events." + session  # noqa: E704
    def exec(self, tool: str) -> str: return self._p + "exec." + tool  # noqa: E704
    def external(self, tool: str) -> str: return self._p + "external." + tool  # noqa: E704
    def confirm(self, tool: str) -> str: return self._p + "confirm." + tool  # noqa: E704
    def answer(self, tool: str) -> str: return self._p + "answer." + tool  # noqa: E704
    def approve(self, tool: str) -> str: return self._p + "approve." + tool  # noqa: E704
    def replay(self, session: str) -> str: return self._p + "replay." + session  # noqa: E704
    def register(self, tool: str) -> str: return self._p + "register." + tool  # noqa: E704
    def register_group(self, group: str) -> str: return self._p + "register.group." + group  # noqa: E704
    def shared_register(self) -> str: return self._p + "register"  # noqa: E704 - protocol 1.11's one subject

    def handoff(self, kind: str, tool: str = "") -> str:
        """``P.handoff.<kind>[.<tool>]``: where a handler or approver follows the handoff through a router (6.2)."""
        return self._p + "handoff." + kind + ("." + tool if tool else "")

    def admin(self, verb: str) -> str: return self._p + "admin." + verb  # noqa: E704
    def outputs(self, session: str) -> str: return self._p + "outputs." + session  # noqa: E704
    def tasks(self, session: str) -> str: return self._p + "tasks." + session  # noqa: E704
    def work(self, tool: str) -> str: return self._p + "work." + tool  # noqa: E704
    def result(self, tool: str) -> str: return self._p + "result." + tool  # noqa: E704
    def all(self, kind: str) -> str: return self._p + kind + ".>"  # noqa: E704
    def exec_queue(self, tool: str) -> str: return self.prefix + "-exec-" + tool  # noqa: E704
    def work_consumer(self, tool: str) -> str: return self.prefix + "-work-" + tool  # noqa: E704
    def bucket(self, name: str) -> str: return self.prefix + "_" + name  # noqa: E704
    def stream(self, name: str) -> str: return self.prefix.upper() + "_" + name  # noqa: E704

    def token(self, subject: str, kind: str) -> str | None:
        """The last token of ``P.<kind>.<token>``, or None."""
        head = self._p + kind + "."
        if not subject.startswith(head):
            return None
        rest = subject[len(head):]
        return rest if rest and "." not in rest else None
