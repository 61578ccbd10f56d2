"""Errors of the toolbus SDK: a small hierarchy, each with a stable protocol ``code``."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import Rejection


class ToolbusError(Exception):
    """Base of every toolbus error. ``code`` is a protocol code (docs/protocol.md 1, 3.3)."""

    code: str = "internal"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code


class BusError(ToolbusError):
    """An ``io.toolbus.error`` reply from a router; ``code`` is the wire code."""


class ProtocolError(ToolbusError):
    """A message that does not follow docs/protocol.md (strict decoding, identifiers, types)."""

    code = "bad_event"


class NoRouterError(ToolbusError):
    """No router (or worker) subscribes to the subject."""

    code = "unavailable"


class TimeoutError(ToolbusError, builtins.TimeoutError):  # noqa: A001 - the SDK's own timeout
    """A request got no reply in time."""

    code = "timeout"


class SchemaError(ToolbusError):
    """A tool's input schema cannot be derived from its signature."""

    code = "bad_request"


class NoToolCallsError(ToolbusError):
    """A model message holds no tool calls."""

    code = "bad_request"


class RegistrationError(ToolbusError):
    """The router rejected some of a worker's tools (docs/protocol.md 7.1)."""

    code = "bad_request"

    def __init__(self, message: str, rejected: list[Rejection]) -> None:
        super().__init__(message)
        self.rejected = rejected


class ToolError(Exception):
    """Raise in a tool for an ``error`` result whose text is exactly the message."""
