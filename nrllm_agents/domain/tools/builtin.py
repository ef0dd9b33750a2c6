"""Built-in tools that need nothing but the standard library."""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..cancel import CallContext, StepInterrupted
from ..errors import ToolError

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPRESSION = 200
_MAX_MAGNITUDE = 10**100


class Calculator:
    """Evaluates arithmetic by walking its syntax tree; nothing is ever ``eval``-ed."""

    name = "calculator"
    description = "Evaluate an arithmetic expression (+ - * / // % ** and parentheses)."
    parameters = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. (2 + 3) * 4"}},
        "required": ["expression"],
        "additionalProperties": False,
    }
    requires_approval = False
    instant = True  # pure arithmetic on a bounded expression: waits on nothing

    def execute(self, arguments: dict[str, Any]) -> Any:
        expression = arguments.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise ToolError("expression must be a non-empty string")
        if len(expression) > _MAX_EXPRESSION:
            raise ToolError(f"expression longer than {_MAX_EXPRESSION} characters")
        try:
            tree = ast.parse(expression, mode="eval")
        except SyntaxError:
            raise ToolError(f"not an arithmetic expression: {expression!r}") from None
        return {"expression": expression, "value": self._eval(tree.body)}

    def _eval(self, node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            result: int | float = _UNARY[type(node.op)](self._eval(node.operand))
            return result
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10**6):
                raise ToolError("exponent too large")
            try:
                value: int | float | complex = _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
            except (OverflowError, ValueError) as exc:
                raise ToolError(f"arithmetic error: {exc}") from None
            if isinstance(value, complex):
                raise ToolError("complex results are not supported")
            if isinstance(value, float) and not math.isfinite(value) or abs(value) > _MAX_MAGNITUDE:
                raise ToolError("result out of range")
            return value
        raise ToolError(f"unsupported syntax: {type(node).__name__}")


class CurrentTime:
    """Tells the current time, in UTC or a named IANA time zone."""

    name = "current_time"
    description = "Return the current date and time, optionally in an IANA time zone."
    parameters = {
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "e.g. Europe/Paris; default UTC"}},
        "additionalProperties": False,
    }
    requires_approval = False
    instant = True  # the clock and the local zone database: waits on nothing

    def execute(self, arguments: dict[str, Any]) -> Any:
        name = arguments.get("timezone") or "UTC"
        if not isinstance(name, str):
            raise ToolError("timezone must be a string")
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(f"unknown time zone {name!r}") from None
        return {"timezone": name, "now": dt.datetime.now(zone).isoformat(timespec="seconds")}


class Sleep:
    """Waits a bounded number of seconds: a stand-in for a slow tool."""

    name = "sleep"
    requires_approval = False

    def __init__(self, max_seconds: float = 30.0) -> None:
        self.max_seconds = max_seconds
        self.description = (
            f"Wait for the given number of seconds (at most {max_seconds:g}), then report how long it waited."
        )
        self.parameters = {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": max_seconds}},
            "required": ["seconds"],
            "additionalProperties": False,
        }

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        """Wait ``seconds``; a cancel ends the wait at once (``StepInterrupted``)."""
        seconds = arguments.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise ToolError("seconds must be a number")
        if not 0 <= seconds <= self.max_seconds:
            raise ToolError(f"seconds must be between 0 and {self.max_seconds:g}")
        if (context or CallContext()).token.wait(seconds):
            raise StepInterrupted()
        return {"slept": seconds}
