"""Every dotted path the docs tell a host or an extender to write imports, and the ones a host
copies from a code block are in public modules (re-exports of the private ones, whose old paths
keep working)."""

from __future__ import annotations

import importlib
import re
from typing import Any

import nrllm_agents
from tests.conftest import ROOT

# the modules whose names a host or an extender writes (docs/reference/python-api.md), and the
# private rooms that define what each re-exports
PUBLIC = {
    "nrllm_agents": (),
    "nrllm_agents.providers": ("nrllm_agents.domain", "nrllm_agents.catalog.registry"),
    "nrllm_agents.tools": ("nrllm_agents.domain", "nrllm_agents.catalog.registry", "nrllm_agents.catalog.tools"),
    "nrllm_agents.middleware": ("nrllm_agents.http",),
    "nrllm_agents.workers": ("nrllm_agents.workers",),
    "nrllm_agents.access": ("nrllm_agents.access.signin",),
}
# modules a host names whole (URLconfs, the queue's job), and Django's own root the rows
# ``status`` and ``steps`` return are defined in (with their choices, which the API's schema names)
PUBLIC_WHOLE = {"nrllm_agents.urls", "nrllm_agents.ag_ui.urls", "nrllm_agents.jobs", "nrllm_agents.models"}
# the built-in providers and tools (nrllm_agents.conf.DEFAULTS)
KINDS = ("scripted", "openai", "anthropic", "gemini", "connection")
BUILT_IN_TOOLS = ("calculator", "current_time", "sleep")
# look like paths in the docs but are not: a logger's name, a file's, system check ids
NOT_PATHS = {"nrllm_agents.runs", "nrllm_agents.env"}
CHECK_ID = re.compile(r"nrllm_agents\.[EW][0-9x]+")
# a dotted path, not one cut short by a table ("nrllm_agents.catalog.registry.scripted_pro…")
PATH = re.compile(r"nrllm_agents(?:\.\w+)+(?![\w…])")


def pages() -> list[str]:
    root = [(ROOT / name).read_text() for name in ("README.md", "ARCHITECTURE.md")]
    return [p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))] + root


def in_code_blocks() -> set[str]:
    blocks = [b for text in pages() for b in re.findall(r"```[^\n]*\n(.*?)```", text, re.S)]
    return {m for b in blocks for m in PATH.findall(b)} - NOT_PATHS


def in_inline_code() -> set[str]:
    spans = [s for text in pages() for s in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]
    return {m for s in spans for m in PATH.findall(s) if not CHECK_ID.fullmatch(m)} - NOT_PATHS


def resolve(path: str) -> tuple[str, Any]:
    """The module that holds ``path`` and what the path names (a module, or a name in it)."""
    try:
        return path, importlib.import_module(path)
    except ModuleNotFoundError:
        module, name = path.rsplit(".", 1)
        return module, getattr(importlib.import_module(module), name)


def test_every_dotted_path_in_the_docs_imports() -> None:
    paths = in_code_blocks() | in_inline_code()
    assert "nrllm_agents.middleware.EdgeGuardMiddleware" in paths and "nrllm_agents.workers.GracefulWorker" in paths
    broken = []
    for path in sorted(paths):
        try:
            resolve(path)
        except (ImportError, AttributeError) as exc:
            broken.append(f"{path}: {exc}")
    assert broken == []


def test_what_a_host_copies_from_a_code_block_is_public() -> None:
    private = [path for path in sorted(in_code_blocks()) if resolve(path)[0] not in {*PUBLIC, *PUBLIC_WHOLE}]
    assert private == []


def test_the_public_modules_re_export_the_private_names_and_the_old_paths_keep_working() -> None:
    for name, private in PUBLIC.items():
        module = importlib.import_module(name)
        assert module.__all__, name
        for export in module.__all__:
            value = getattr(module, export)
            if private and not isinstance(value, str):
                # the same object as the private module's, not a copy
                assert value.__module__.startswith(private), (name, export, value.__module__)
                assert getattr(importlib.import_module(value.__module__), export) is value
    old = {
        "nrllm_agents.http.edge.EdgeGuardMiddleware": "nrllm_agents.middleware.EdgeGuardMiddleware",
        "nrllm_agents.http.csp.ContentSecurityPolicyMiddleware": (
            "nrllm_agents.middleware.ContentSecurityPolicyMiddleware"
        ),
        "nrllm_agents.workers.rq_worker.GracefulWorker": "nrllm_agents.workers.GracefulWorker",
        "nrllm_agents.workers.threaded.ThreadedWorker": "nrllm_agents.workers.ThreadedWorker",
        "nrllm_agents.domain.errors.ProviderError": "nrllm_agents.providers.ProviderError",
        "nrllm_agents.domain.steps.ModelResponse": "nrllm_agents.providers.ModelResponse",
        "nrllm_agents.domain.errors.ToolError": "nrllm_agents.tools.ToolError",
        "nrllm_agents.access.signin.ThrottledModelBackend": "nrllm_agents.access.ThrottledModelBackend",
        "nrllm_agents.validation.run_request.RunRequest": "nrllm_agents.RunRequest",
        # the built-in factories by the paths of earlier releases' settings, and of this round's
        "nrllm_agents.catalog.scripted_provider": "nrllm_agents.providers.scripted_provider",
        "nrllm_agents.catalog.calculator_tool": "nrllm_agents.tools.calculator_tool",
        **{f"nrllm_agents.catalog.registry.{k}_provider": f"nrllm_agents.providers.{k}_provider" for k in KINDS},
        **{f"nrllm_agents.catalog.registry.{n}_tool": f"nrllm_agents.tools.{n}_tool" for n in BUILT_IN_TOOLS},
        "nrllm_agents.catalog.tools.WriteNote": "nrllm_agents.tools.WriteNote",
    }
    assert {path: resolve(path)[1] for path in old} == {path: resolve(new)[1] for path, new in old.items()}


def test_the_python_api_page_lists_every_public_module_and_name() -> None:
    page = (ROOT / "docs" / "reference" / "python-api.md").read_text()
    missing = [
        f"{name}.{export}"
        for name in PUBLIC
        if name != "nrllm_agents"
        for export in importlib.import_module(name).__all__
        if f"`{name}`" not in page or f"`{export}`" not in page
    ]
    assert missing == []


def test_rq_and_django_find_the_workers_and_factories_by_their_public_paths() -> None:
    """RQ's ``WORKER_CLASS`` and Django's ``import_string`` reach names a package re-exports on
    first use (PEP 562), as they reach names a module defines."""
    from django.utils.module_loading import import_string
    from rq.utils import import_attribute

    from nrllm_agents.catalog.registry import calculator_tool, scripted_provider
    from nrllm_agents.workers.rq_worker import GracefulWorker

    assert import_attribute("nrllm_agents.workers.GracefulWorker") is GracefulWorker
    assert import_string("nrllm_agents.providers.scripted_provider") is scripted_provider
    assert import_string("nrllm_agents.tools.calculator_tool") is calculator_tool


def test_every_path_a_host_sees_by_default_is_public() -> None:
    """The defaults of ``NRLLM_AGENTS["PROVIDERS"]`` and ``["TOOLS"]`` (shown by the settings
    reference, ``manage.py agent_tools`` and check E023), the edge guard check W013 asks for, and
    the dotted paths the demo project's settings write, are public paths."""
    from nrllm_agents.checks import EDGE_MIDDLEWARE
    from nrllm_agents.conf import DEFAULTS

    shown = [*DEFAULTS["PROVIDERS"].values(), *DEFAULTS["TOOLS"].values(), EDGE_MIDDLEWARE]
    host = (ROOT / "config" / "settings.py").read_text()
    written = re.findall(r"[\"'](nrllm_agents(?:\.\w+)+)[\"']", host)
    assert "nrllm_agents.workers.GracefulWorker" in written and len(shown) == 9
    assert [path for path in [*shown, *written] if resolve(path)[0] not in {*PUBLIC, *PUBLIC_WHOLE}] == []


def test_the_defaults_the_extend_page_shows_are_the_settings_defaults() -> None:
    from nrllm_agents.conf import DEFAULTS

    text = (ROOT / "docs" / "howto" / "extend.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if '"scripted": "nrllm_agents' in b]
    shown: dict[str, Any] = {}
    exec(block, shown)
    assert shown["NRLLM_AGENTS"] == {"PROVIDERS": DEFAULTS["PROVIDERS"], "TOOLS": DEFAULTS["TOOLS"]}


def test_settings_that_name_the_older_paths_keep_working(settings) -> None:
    """A host's settings written for an earlier release: the built-ins by their private paths
    still build, are still listed as built-in, and the old edge guard path satisfies W013."""
    from nrllm_agents import checks
    from nrllm_agents.catalog import registry

    settings.NRLLM_AGENTS = {
        "PROVIDERS": {"scripted": "nrllm_agents.catalog.registry.scripted_provider"},
        "TOOLS": {
            "calculator": "nrllm_agents.catalog.registry.calculator_tool",
            "write_note": "nrllm_agents.catalog.tools.WriteNote",
        },
    }
    public, older = checks.EDGE_MIDDLEWARE_PATHS
    settings.MIDDLEWARE = [older if m == public else m for m in settings.MIDDLEWARE]
    assert older in settings.MIDDLEWARE and public not in settings.MIDDLEWARE
    sources = {e["name"]: e["source"] for e in registry.offered_tools()[0]}
    assert (sources["calculator"], sources["write_note"], sources["sleep"]) == ("built-in",) * 3
    request = nrllm_agents.RunRequest(prompt="hi", script=[{"content": "hello"}])
    assert registry.build_provider(request).name == "scripted"
    assert registry.build_tools(["calculator"])["calculator"].execute({"expression": "6*7"})["value"] == 42
    assert "nrllm_agents.W013" not in {m.id for m in checks.check_host()}
