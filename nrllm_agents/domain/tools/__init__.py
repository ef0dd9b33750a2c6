"""Tools: the protocol and the built-in ones."""

from .base import Tool, schema
from .builtin import Calculator, CurrentTime, Sleep
from .typed import FunctionTool, tool

__all__ = ["Calculator", "CurrentTime", "FunctionTool", "Sleep", "Tool", "schema", "tool"]
