"""The one entry point, ``AgentRuntime``, and the life of a segment: the ladder, the trace hook of
a segment (``segment``), per-run limits (``limits``), forks and threads."""

from .agent_runtime import AgentRuntime, CancelResult

__all__ = ["AgentRuntime", "CancelResult"]
