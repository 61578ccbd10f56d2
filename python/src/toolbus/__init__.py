"""toolbus: agents and tool workers on NATS, speaking docs/protocol.md (see python/API.md)."""

from .client import Client, EventStream, Resend
from .follow import FollowStream, HandoffStream, ReplayStream
from .errors import (BusError, NoRouterError, NoToolCallsError, ProtocolError, RegistrationError, SchemaError,
                     TimeoutError, ToolbusError, ToolError)
from .event import Event, Subjects, input_digest, valid_id, valid_name
from .model import ModelReply, ModelTurn, load_groups, parse_model_turn, reset_input
from .records import (Answer, Block, Call, ExternalRequest, ExternalTool, Group, GroupInfo, Parked, Rejection, Reply, Request, Result,
                      ResultError, Rule, ToolDef, ToolsList)
from .tool import State, Tool, ToolContext, ToolResult, tool
from .worker import Worker, serve

__all__ = [
    "Answer", "Block", "BusError", "Call", "Client", "Event", "EventStream", "ExternalRequest", "ExternalTool", "FollowStream", "HandoffStream", "Group", "GroupInfo",
    "ModelReply", "ModelTurn", "NoRouterError", "NoToolCallsError", "Parked", "ProtocolError", "RegistrationError",
    "Rejection", "ReplayStream", "Reply", "Request", "Resend", "Result", "ResultError", "Rule", "SchemaError", "State", "Subjects", "TimeoutError",
    "Tool", "ToolContext", "ToolDef", "ToolError", "ToolResult", "ToolbusError", "ToolsList", "Worker", "input_digest",
    "load_groups", "parse_model_turn", "reset_input", "serve", "tool", "valid_id", "valid_name",
]
__version__ = "0.1.0"
