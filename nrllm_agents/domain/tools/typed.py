"""Tools from typed functions: ``@tool`` on a function with type hints and a docstring.

The name is the function's, the description its docstring's first paragraph (an ``Args:`` section
describes each parameter), and the JSON schema of the arguments is the one pydantic builds from
the signature. The model's arguments are validated against that schema before the function runs:
invalid ones (a wrong type, a missing or an unknown argument) are a ``ToolError`` fed back to the
model, never an exception in the loop. A parameter named ``context`` is not an argument: it gets
the call's ``CallContext``, so the function can be interrupted by a cancel. Nor is one named
``idempotency_key``: it gets the call's key (``CallContext.idempotency_key``), the same every time
the call is repeated, to hand to an API that honours idempotency keys.

The decorator registers nothing: the function becomes a ``FunctionTool`` (still callable as
before), and the app finds the ones in each installed app's ``agent_tools`` module at start-up.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, overload

import pydantic

from ..errors import ToolError

CONTEXT = "context"
IDEMPOTENCY_KEY = "idempotency_key"
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class FunctionTool:
    """A ``Tool`` made from a typed function (see the module docstring); calling it calls the function."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        idempotent: bool = True,
        instant: bool = False,
        transactional: bool = False,
        models: Sequence[Any] = (),
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        summary, documented = _parse_docstring(inspect.getdoc(function) or "")
        self.description = description if description is not None else summary
        self.requires_approval = requires_approval
        self.idempotent = idempotent
        self.instant = instant
        self.transactional = transactional
        self.models = tuple(models)  # what a transactional tool writes (the check of its database)
        self.model, self.takes = _arguments_model(function, self.name, documented)
        self.parameters = _schema(self.model)
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", self.name)
        self.__module__ = function.__module__
        self.__wrapped__ = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name} of {self.__module__}>"

    def execute(self, arguments: dict[str, Any], context: Any = None) -> Any:
        """Validate ``arguments`` against the schema, call the function, return a JSON value.

        Raises ``ToolError`` naming every invalid argument; what the function raises propagates
        (its own ``ToolError`` goes back to the model, anything else fails the run).
        """
        try:
            validated = self.model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolError(f"invalid arguments for {self.name}: {_describe(exc)}") from None
        kwargs = {field: getattr(validated, field) for field in type(validated).model_fields}
        if CONTEXT in self.takes:
            kwargs[CONTEXT] = context
        if IDEMPOTENCY_KEY in self.takes:
            kwargs[IDEMPOTENCY_KEY] = getattr(context, IDEMPOTENCY_KEY, None)  # None outside a run
        return _jsonable(self.function(**kwargs))


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = True,
    instant: bool = False,
    transactional: bool = False,
    models: Sequence[Any] = (),
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = True,
    instant: bool = False,
    transactional: bool = False,
    models: Sequence[Any] = (),
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a typed function: ``@tool`` or ``@tool(requires_approval=True, ...)``.

    Parameters
    ----------
    name, description:
        Override the function's name and its docstring's first paragraph.
    requires_approval:
        The run waits for a person's approval before each call.
    idempotent:
        False for a side effect that must not happen twice (the write fence); one that hands its
        ``idempotency_key`` to an API that honours it may stay idempotent.
    instant:
        True for a function that returns at once, waiting on nothing (no I/O, no sleep, no lock).
    transactional, models:
        True for ORM writes that commit with its step or not at all; ``models``: those it writes.

    Returns
    -------
    A ``FunctionTool``. Raises ``TypeError`` for a parameter without a type hint, ``*args`` or
    ``**kwargs``, or a hint pydantic cannot make a schema of.
    """

    def make(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            idempotent=idempotent,
            instant=instant,
            transactional=transactional,
            models=models,
        )

    return make(function) if function is not None else make


def _arguments_model(
    function: Callable[..., Any], name: str, documented: dict[str, str]
) -> tuple[type[pydantic.BaseModel], frozenset[str]]:
    """The model of the model's arguments, and which of the runtime's parameters the function takes."""
    signature = inspect.signature(function, eval_str=True)
    fields: dict[str, Any] = {}
    takes: set[str] = set()
    for parameter in signature.parameters.values():
        if parameter.name in (CONTEXT, IDEMPOTENCY_KEY):  # given by the runtime, never by the model
            takes.add(parameter.name)
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"@tool {name}: *{parameter.name} cannot be described to a model; name each argument")
        if parameter.annotation is inspect.Parameter.empty:
            raise TypeError(f"@tool {name}: parameter {parameter.name!r} needs a type hint")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (
            parameter.annotation,
            pydantic.Field(default, description=documented.get(parameter.name)),
        )
    try:
        model = pydantic.create_model(
            f"{name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
        raise TypeError(f"@tool {name}: {exc}") from None
    return model, frozenset(takes)


def _schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The arguments' JSON schema, without pydantic's titles (noise in every prompt)."""

    def strip(node: Any, *, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            return {
                key: strip(value, in_properties=key == "properties")
                for key, value in node.items()
                if in_properties or key != "title"
            }
        if isinstance(node, list):
            return [strip(item) for item in node]
        return node

    schema: dict[str, Any] = strip(model.model_json_schema())
    schema.setdefault("properties", {})
    return schema


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and each parameter's description from a Google-style ``Args:`` section."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary.append(line.strip())
    documented: dict[str, str] = {}
    current: str | None = None
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if not in_args:
            continue
        if line.strip() and not line.startswith((" ", "\t")):
            break  # the next section
        match = _ARG_LINE.match(line)
        if match and (current is None or len(line) - len(line.lstrip()) <= _indent_of(lines, current)):
            current = match.group(1).lstrip("*")
            documented[current] = match.group(2).strip()
        elif current and line.strip():
            documented[current] = f"{documented[current]} {line.strip()}".strip()
    return " ".join(summary), documented


def _indent_of(lines: list[str], name: str) -> int:
    for line in lines:
        match = _ARG_LINE.match(line)
        if match and match.group(1).lstrip("*") == name:
            return len(line) - len(line.lstrip())
    return 0


def _describe(exc: pydantic.ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _jsonable(value: Any) -> Any:
    """A return value as JSON: pydantic models (at any depth) dumped, the rest as pydantic sees it."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return pydantic.TypeAdapter(Any).dump_python(value, mode="json")
