"""Large outputs (docs/protocol.md 5.9): storing what does not fit, and references to it."""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import json
import re
import secrets
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .event import _q
from .errors import ProtocolError, ToolbusError
from .records import Block

SCHEME = "nats-object"
DEFAULT_INLINE_LIMIT = 1 << 20
DEFAULT_MAX_OUTPUT = 64 << 20
RESERVE = 64 << 10
PREVIEW_BYTES = 2048
CHUNK_SIZE = 128 << 10
# Bytes of chunks one Offloader (one connection) has published ahead of their acknowledgements,
# all its puts together: what a heartbeat or a reply sent meanwhile may queue behind, and all the
# chunks it holds in flight (Go's offload.PutWindow; docs/offload.md, paced writes).
PUT_WINDOW = 1 << 20
PUT_TIMEOUT = 120.0  # bounds storing one output (Go's offload.PutTimeout)
ACK_WAIT = 10.0  # bounds the wait for a chunk's acknowledgement, so a stalled put frees the shared window (Go's offload.AckWait)
MAX_REF_LEN = 2048
HEADER_SESSION = "Toolbus-Session"
HEADER_CALL = "Toolbus-Call"

_BUCKET = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


class TooLargeError(ToolbusError):
    """An output past the sender's ceiling: neither sent nor stored."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the output is {size} bytes, more than the limit of {limit} bytes; it was neither sent nor stored", "internal")
        self.size, self.limit = size, limit


@dataclass
class Ref:
    """A parsed ``nats-object://<bucket>/<name>#sha256=<digest>`` reference."""

    bucket: str
    name: str
    digest: str = ""

    @property
    def session(self) -> str:
        return self.name.split(".", 1)[0]

    def __str__(self) -> str:
        s = f"{SCHEME}://{self.bucket}/{urllib.parse.quote(self.name, safe='')}"
        return s + (f"#sha256={self.digest}" if self.digest else "")


def parse_ref(ref: str) -> Ref:
    """Parse a stored output's url; raises ProtocolError (bad_request)."""
    short = ref if len(ref) <= 200 else ref[:200] + "…"
    if len(ref) > MAX_REF_LEN:
        raise ProtocolError(f"reference {_q(short)} is longer than {MAX_REF_LEN} bytes", "bad_request")
    head = SCHEME + "://"
    if not ref.startswith(head):
        raise ProtocolError(f"reference {_q(short)} is not a {SCHEME}:// URL", "bad_request")
    rest, _, frag = ref[len(head):].partition("#")
    bucket, slash, name = rest.partition("/")
    if not slash or not _BUCKET.match(bucket):
        raise ProtocolError(f"reference {_q(short)} does not name a bucket ({SCHEME}://<bucket>/<name>)", "bad_request")
    name = urllib.parse.unquote(name)
    if not name:
        raise ProtocolError(f"reference {_q(short)} does not name an object", "bad_request")
    digest = ""
    if "#" in ref:
        if not frag.startswith("sha256=") or not _HEX.match(frag[7:]):
            raise ProtocolError(f"reference {_q(short)}: the part after '#' must be sha256=<64 lower-case hex digits>", "bad_request")
        digest = frag[7:]
    return Ref(bucket, name, digest)


def _enc(b: Block) -> int:
    return len(json.dumps(b.to_json(), separators=(",", ":"), ensure_ascii=False).encode())


def _bound(b: Block) -> int:
    """At least b's encoded size: an escaped character takes at most six bytes, the names and
    punctuation less than 160 (160 more with annotations); every member counts (session 34)."""
    n = 160 + 6 * sum(map(len, (b.type, b.text, b.media_type, b.data, b.url, b.uri, b.name, b.title, b.description)))
    if b.annotations is not None:
        n += 160 + 6 * (len(b.annotations.last_modified) + sum(len(a) + 1 for a in b.annotations.audience))
    return n


def block_size(b: Block, dup: bool) -> int:
    n = _enc(b)
    return 2 * n if dup and b.type == "text" else n


def output_size(out: list[Block], dup: bool) -> int:
    """The length of the output array encoded as JSON; text counted twice for failures (5.9)."""
    return 2 + sum(block_size(b, dup) for b in out) + max(len(out) - 1, 0)


def _preview(s: str, n: int) -> str:
    """The beginning of s, at most n UTF-8 bytes, cut at a character, with "…" when cut."""
    raw = s.encode()
    if len(raw) <= n:
        return s
    return raw[:max(n, 0)].decode("utf-8", "ignore") + "…"


def _suffix(s: str, n: int) -> str:
    """The end of s, at most n UTF-8 bytes, cut at a character."""
    raw = s.encode()
    if len(raw) <= n:
        return s
    return raw[len(raw) - max(n, 0):].decode("utf-8", "ignore")


def head_tail(s: str, keep: int, url: str) -> str:
    """What stays inline of a stored text, byte for byte as the Go offloader's headTail: its beginning
    and end (together at most keep bytes, three quarters and one quarter, cut at characters) and a
    note with its size, digest and reference, naming read_output (docs/protocol.md 5.9, 11)."""
    digest = parse_ref(url).digest
    keep = max(keep - len(url.encode()) - 320, min(keep, 64))
    tail_n = keep // 4
    head = _preview(s, keep - tail_n)
    head = head[:-1] if head.endswith("…") else head
    rest = s[len(head):]
    tail = _suffix(rest, tail_n)
    size, head_len, tail_len = len(s.encode()), len(head.encode()), len(tail.encode())
    left = size - head_len - tail_len
    return (f"{head}\n[… {left} bytes left out …]\n{tail}\n[The whole text, {size} bytes (sha256 {digest}), is too large to "
            f"show here: above are its first {head_len} and last {tail_len} bytes. It is stored as {url}; "
            "read_output reads any part of it.]")


class Offloader:
    """Fits an output under the inline limit by storing its largest blocks (5.9)."""

    def __init__(self, nc: Any, bucket: str, inline: int = DEFAULT_INLINE_LIMIT, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        self.nc = nc
        self.bucket = bucket
        self.inline = inline if inline > 0 else DEFAULT_INLINE_LIMIT
        self.max = max_output if max_output > 0 else DEFAULT_MAX_OUTPUT
        self._js: Any = None
        self._room = asyncio.Semaphore(PUT_WINDOW // CHUNK_SIZE)  # a chunk published, not yet acknowledged

    def limit(self, extra: int = 0) -> int:
        room = int(self.nc.max_payload) - RESERVE - extra
        return max(min(self.inline, room), 0)

    async def fit(self, key: str, out: list[Block], extra: int = 0, dup: bool = False) -> list[Block]:
        """The output itself when it fits, else with its largest blocks replaced by references."""
        limit = self.limit(extra)
        quick = 2 + sum(_bound(b) * (2 if dup else 1) for b in out)
        if quick <= limit and quick <= self.max:
            return out
        sizes = [block_size(b, dup) for b in out]  # each block encoded once
        size = 2 + sum(sizes) + max(len(out) - 1, 0)
        if size > self.max:
            raise TooLargeError(size, self.max)
        if size <= limit:
            return out
        session = key.split(".", 1)[0]
        base = key + "." + secrets.token_hex(16)
        order = sorted(range(len(out)), key=lambda i: -sizes[i])
        repl: dict[int, list[Block]] = {}
        for i in order:
            if size <= limit:
                break
            b = out[i]
            if b.type != "text" and (b.type != "data" or not b.data):
                continue
            blocks = await self._spill(session, key, f"{base}.{i}", b, min(limit // 4, PREVIEW_BYTES))
            repl[i] = blocks
            size += output_size(blocks, dup) - 2 - sizes[i]
        if size > limit:
            raw = json.dumps([b.to_json() for b in out], separators=(",", ":"), ensure_ascii=False).encode()
            ref = await self.put(session, key, base + ".all", "application/json", raw)
            return [Block.text_block(f"[The output, {len(out)} blocks, is too large to show here; it is stored as {ref.url}.]"), ref]
        res: list[Block] = []
        for i, b in enumerate(out):
            res.extend(repl.get(i, [b]))
        return res

    async def _spill(self, session: str, key: str, name: str, b: Block, keep: int) -> list[Block]:
        if b.type == "text":
            raw = b.text.encode()
            ref = await self.put(session, key, name, "text/plain; charset=utf-8", raw)
            return [Block.text_block(head_tail(b.text, keep, ref.url)), ref]
        try:
            raw = base64.b64decode(b.data + "=" * (-len(b.data) % 4), validate=True)
        except ValueError:
            raise ToolbusError("a data block's data is not base64") from None
        ref = await self.put(session, key, name, b.media_type or "application/octet-stream", raw)
        ref.media_type = b.media_type
        return [ref]

    async def put(self, session: str, key: str, name: str, media: str, data: bytes) -> Block:
        """Store data as object ``name`` in the object store's layout; the reference block."""
        if self._js is None:
            self._js = self.nc.jetstream()
        token = secrets.token_hex(16)
        subj = f"$O.{self.bucket}.C.{token}"
        h = hashlib.sha256()
        chunks = 0
        deadline = asyncio.get_running_loop().time() + PUT_TIMEOUT
        pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        try:
            for off in range(0, len(data), CHUNK_SIZE):
                part = data[off:off + CHUNK_SIZE]
                h.update(part)
                await self._send(pending, deadline, subj, part)
                chunks += 1
            await self._wait(pending, deadline)  # every chunk stored before the metadata names them
            digest = h.hexdigest()
            info = {"name": name, "description": "toolbus output",
                    "headers": {"Content-Type": [media], HEADER_SESSION: [session], HEADER_CALL: [key]},
                    "options": {"max_chunk_size": CHUNK_SIZE}, "bucket": self.bucket, "nuid": token,
                    "size": len(data), "mtime": "0001-01-01T00:00:00Z", "chunks": chunks,
                    "digest": "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(digest)).decode()}
            meta = "$O." + self.bucket + ".M." + base64.urlsafe_b64encode(name.encode()).decode()
            await self._send(pending, deadline, meta, json.dumps(info, separators=(",", ":")).encode(),
                             {"Nats-Expected-Last-Subject-Sequence": "0"})
            await self._wait(pending, deadline)
        except asyncio.TimeoutError:
            raise ToolbusError(f"storing {len(data)} bytes in {self.bucket}: not acknowledged in time (a chunk within {ACK_WAIT:g} s, the output within {PUT_TIMEOUT:g} s)") from None
        except Exception as err:  # noqa: BLE001 - reported with what failed
            if type(err).__name__ in ("NoRespondersError", "NoStreamResponseError"):
                raise ToolbusError(f"the outputs object store {self.bucket} does not exist (a router creates it at start): {err}") from None
            raise ToolbusError(f"storing {len(data)} bytes in {self.bucket}: {_q(err)}") from None
        finally:
            self._end(pending)
        ref = Ref(self.bucket, name, digest)
        return Block(type="data", media_type=media, url=str(ref), size=len(data))

    async def _send(self, pending: collections.deque[asyncio.Future[Any]], deadline: float, subject: str, payload: bytes,
                    headers: dict[str, str] | None = None) -> None:
        """Publish once the window has room; meanwhile this put's own acknowledgements give theirs back,
        so puts sharing the window never wait for each other's unread acknowledgements."""
        while pending and self._room.locked():
            await self._acked(pending, deadline)
        await asyncio.wait_for(self._room.acquire(), max(deadline - asyncio.get_running_loop().time(), 0))
        try:
            pending.append(await self._js.publish_async(subject, payload, headers=headers))
        except BaseException:
            self._room.release()
            raise

    async def _wait(self, pending: collections.deque[asyncio.Future[Any]], deadline: float) -> None:
        """Wait for every acknowledgement, in order."""
        while pending:
            await self._acked(pending, deadline)

    async def _acked(self, pending: collections.deque[asyncio.Future[Any]], deadline: float) -> None:
        await asyncio.wait_for(pending[0], min(max(deadline - asyncio.get_running_loop().time(), 0), ACK_WAIT))
        pending.popleft()
        self._room.release()

    def _end(self, pending: collections.deque[asyncio.Future[Any]]) -> None:
        """A failed put: its publishes never acknowledged give their room back (their bytes are the connection's)."""
        while pending:
            f = pending.popleft()
            if f.done() and not f.cancelled():
                f.exception()  # retrieved: no "never retrieved" warning
            f.cancel()
            self._room.release()
