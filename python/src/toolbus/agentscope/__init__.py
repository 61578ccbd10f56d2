"""AgentScope on the bus (agentscope 2.0.11).

- :class:`BusToolkit`: an AgentScope ``Toolkit`` (and middleware) whose tools are
  the bus's: ``Agent(..., toolkit=tk, middlewares=[tk])``.
- :func:`serve`: AgentScope tools served on the bus as workers.
- :class:`ScriptedModel`: a chat model that replays predetermined tool calls.

docs/agentscope.md says how the bus maps onto AgentScope and every difference.
"""
from ._scripted import ScriptedModel, external_tool
from ._serve import definition, serve
from ._toolkit import BusToolkit

__all__ = ["BusToolkit", "ScriptedModel", "definition", "external_tool", "serve"]
