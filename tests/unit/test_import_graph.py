"""The package's modules import each other as floors: no cycle, imports inside functions included.

Guards what once was: ``dispatch → jobs → runtime → dispatch`` and ``store.runs ↔ store.cancels``
were cycles hidden behind imports inside functions, so no reader could tell which layer was
below which.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "nrllm_agents"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of the package that ``name`` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    resolved = set()
    for target in targets:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        # A package's own __init__ (``from . import x`` inside it) is not a dependency on a floor.
        if target in known and target != name and not name.startswith(target + "."):
            resolved.add(target)
    return resolved


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_the_package():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert cycles(graph) == []


def test_the_executors_sit_below_the_runtime():
    """The backends never reach the runtime or the job: the app's ready() hands them the job."""
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    below = {name for name in known if name.startswith("nrllm_agents.executors")}
    assert below and "nrllm_agents.executors.rq_queue" in below
    reached, todo = set(), list(below)
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert not any(name.startswith(("nrllm_agents.runtime", "nrllm_agents.workers")) for name in reached)


# The floors of ARCHITECTURE.md, lowest first. A floor is one or more folders of the package (a
# Django root module at the app root names its own floor); a module imports only from its own
# floor and the ones below. ``conf`` (the settings, read by every floor) is the one module on none.
FLOORS = [
    ("domain", ("domain",)),
    ("mcp", ("mcp",)),
    ("crypto", ("crypto",)),
    ("models", ("models",)),
    ("testing", ("testing",)),
    ("store", ("store",)),
    ("money", ("money",)),
    ("words", ("access", "validation", "presentation", "admission")),
    ("catalog", ("catalog",)),
    ("executors", ("executors",)),
    ("observability", ("observability",)),
    ("live", ("live",)),
    ("runtime", ("runtime",)),
    ("workers", ("workers", "jobs")),
    ("surfaces", ("http", "api", "agent_protocol", "ag_ui", "web", "admin", "management")),
    ("app", ("apps", "checks", "urls")),
    # the public modules a host or an extender writes: re-exports only, imported by no floor below
    ("public", ("providers", "tools", "middleware")),
]
# the package's own __init__ imports its public names on first use only (PEP 562 __getattr__)
UNCHECKED = {"nrllm_agents", "nrllm_agents.conf"}


def floor_of(name: str) -> int | None:
    parts = name.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for level, (_, folders) in enumerate(FLOORS):
        if top in folders:
            return level
    return None


def test_every_module_sits_on_a_floor():
    """Each module's first folder (or, at the root, its own name) is one of the floors."""
    assert sorted(name for name in modules() if floor_of(name) is None and name not in UNCHECKED) == []
    # the package itself imports nothing at run time: tests/integration/startup/test_public_names.py


def test_the_root_holds_only_djangos_roots():
    """At most ten modules at the package root: Django's own roots, the settings, the package."""
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    # jobs: the job's name on the queue (a contract); urls: what a host includes; middleware,
    # providers and tools: public modules in front of private ones (docs/reference/python-api.md)
    assert root == [
        "__init__.py",
        "apps.py",
        "checks.py",
        "conf.py",
        "jobs.py",
        "middleware.py",
        "models.py",
        "providers.py",
        "tools.py",
        "urls.py",
    ]
    assert len(root) <= 10


def test_the_modules_sit_on_their_floors():
    known = modules()
    upward = []
    for name, path in known.items():
        level = floor_of(name)
        if level is None:
            continue
        for target in imports(name, path, known):
            target_level = floor_of(target)
            if target_level is not None and target_level > level:
                upward.append(f"{name} ({FLOORS[level][0]}) imports {target} ({FLOORS[target_level][0]})")
    assert upward == []
    assert all(any(floor_of(name) == level for name in known) for level in range(len(FLOORS)))


def test_no_import_cycle_between_folders():
    """A floor's folders do not reach back into each other (``api`` and ``web`` are siblings)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        here = name.split(".")[1] if "." in name else name
        graph.setdefault(here, set())
        for target in imports(name, path, known):
            there = target.split(".")[1] if "." in target else target
            if there != here:
                graph[here].add(there)
                graph.setdefault(there, set())
    assert cycles(graph) == []


LONG_MODULE_LINES = 800


def test_a_module_near_800_lines_is_flagged_not_refused():
    """Modules split by concept, not by size: a long one is a prompt to look, shown as a warning."""
    for name, path in sorted(modules().items()):
        if (n := len(path.read_text().splitlines())) > LONG_MODULE_LINES:
            warnings.warn(f"{name} has {n} lines: does it hold more than one concept?", stacklevel=1)


def test_the_floor_check_sees_an_upward_import():
    store, runtime, api = (floor_of(f"nrllm_agents.{m}") for m in ("store.runs", "runtime.agent_runtime", "api.views"))
    assert store is not None and runtime is not None and api is not None
    assert store < runtime < api
    assert floor_of("nrllm_agents.conf") is None


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_domain_imports_no_django():
    for path in (PACKAGE / "domain").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n == "django" or n.startswith("django.") for n in names), path
