"""Names a public module re-exports from a private one on first use (PEP 562): importing the
public module loads neither the private one nor what that needs (Django's settings, RQ's worker).
Here, on the lowest floor, so every public module and package can share it; it imports nothing
of the package itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def on_first_use(namespace: dict[str, Any], sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``namespace`` (the module's ``globals()``).

    Each name of ``sources`` is imported from its module (absolute, or relative to the
    namespace's package) when first asked for, and kept in the namespace, so the next lookup
    finds it without coming back here: the re-export is the private module's own object. Any
    other name raises ``AttributeError``.
    """
    module_name = namespace["__name__"]
    package = namespace.get("__package__") or module_name

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(import_module(source, package), name)
        namespace[name] = value
        return value

    return __getattr__
