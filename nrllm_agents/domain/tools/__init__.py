"""Tools: the protocol and the built-in ones."""

from .base import Tool, schema
from .builtin import Calculator, CurrentTime, Sleep

__all__ = ["Calculator", "CurrentTime", "Sleep", "Tool", "schema"]
