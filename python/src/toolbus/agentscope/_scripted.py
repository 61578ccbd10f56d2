"""A scripted AgentScope chat model: predetermined tool calls, no network.

Used by the differential tests and by examples/python/agentscope_agent.py. Each
model call takes the next step of the script; a step is a list of tool calls
``(name, input)`` (``input`` a dict, or a str passed through unchanged, as a
model's raw arguments) or a plain text (the final answer). Every call records the
tool schemas the model was shown, so a test can compare them turn by turn.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence, Union

from pydantic import BaseModel

from agentscope.credential import CredentialBase
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock
from agentscope.model import ChatModelBase, ChatResponse

if TYPE_CHECKING:
    from agentscope.tool import ToolBase

Step = Union[str, Sequence[tuple[str, Any]]]


class _NoCredential(CredentialBase):
    """The scripted model calls no API."""

    @classmethod
    def get_chat_model_class(cls) -> type:
        return ScriptedModel


class ScriptedModel(ChatModelBase):
    """A chat model that replays a script and records what it was shown."""

    class Parameters(BaseModel):
        """No parameters."""

    def __init__(self, script: Sequence[Step], *, id_prefix: str = "call") -> None:
        super().__init__(
            credential=_NoCredential(),
            model="scripted",
            parameters=ScriptedModel.Parameters(),
            stream=False,
            max_retries=0,
        )
        self.formatter = OpenAIChatFormatter()
        self.script = list(script)
        self.id_prefix = id_prefix
        self.step = 0
        self.n_calls = 0
        #: the ``tools`` argument of every model call, in order
        self.seen_tools: list[list[dict]] = []
        #: the system prompt of every model call, in order
        self.seen_system: list[str] = []

    async def _call_api(
        self,
        model_name: str,
        messages: list[Msg],
        tools: list[dict] | None = None,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.seen_tools.append(json.loads(json.dumps(tools or [])))
        self.seen_system.append(
            "".join(m.get_text_content() or "" for m in messages if m.role == "system"),
        )
        if self.step >= len(self.script):
            return ChatResponse(content=[TextBlock(text="done")], is_last=True)
        step = self.script[self.step]
        self.step += 1
        if isinstance(step, str):
            return ChatResponse(content=[TextBlock(text=step)], is_last=True)
        blocks: list[Any] = []
        for name, inp in step:
            self.n_calls += 1
            raw = inp if isinstance(inp, str) else json.dumps(inp)
            blocks.append(
                ToolCallBlock(id=f"{self.id_prefix}{self.n_calls}", name=name, input=raw),
            )
        return ChatResponse(content=blocks, is_last=True)


def external_tool(name: str, description: str, input_schema: dict) -> "ToolBase":
    """A schema-only AgentScope tool whose caller executes it (AgentScope's
    external execution): for BusToolkit's request-scoped tools, and in-process."""
    from agentscope.permission import PermissionBehavior, PermissionDecision
    from agentscope.tool import ToolBase

    class _External(ToolBase):
        is_external_tool = True
        is_read_only = False
        is_concurrency_safe = True

        async def check_permissions(self, tool_input: dict, context: Any) -> PermissionDecision:
            return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="answered by the caller")

    t = _External()
    t.name, t.description, t.input_schema = name, description, input_schema
    return t
