"""Every dotted path the docs tell a host or an extender to write imports, and the ones a host
copies from a code block are in public modules (re-exports of the private ones, whose old paths
keep working)."""

from __future__ import annotations

import importlib
import re
from typing import Any

from tests.conftest import ROOT

# the modules whose names a host or an extender writes (docs/reference/python-api.md)
PUBLIC = {
    "nrllm_agents": None,
    "nrllm_agents.providers": "nrllm_agents.domain",
    "nrllm_agents.middleware": "nrllm_agents.http",
    "nrllm_agents.workers": "nrllm_agents.workers",
    "nrllm_agents.catalog": "nrllm_agents.catalog.registry",
    "nrllm_agents.access": "nrllm_agents.access.signin",
}
# modules a host names whole (URLconfs, the queue's job)
PUBLIC_WHOLE = {"nrllm_agents.urls", "nrllm_agents.ag_ui.urls", "nrllm_agents.jobs"}
# look like paths in the docs but are not: a logger's name, a file's, system check ids
NOT_PATHS = {"nrllm_agents.runs", "nrllm_agents.env"}
CHECK_ID = re.compile(r"nrllm_agents\.[EW][0-9x]+")
# a dotted path, not one cut short by a table ("nrllm_agents.catalog.registry.scripted_pro…")
PATH = re.compile(r"nrllm_agents(?:\.\w+)+(?![\w…])")


def pages() -> list[str]:
    return [p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))] + [(ROOT / "README.md").read_text()]


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
            if private is not None and not isinstance(value, str):
                # the same object as the private module's, not a copy
                assert value.__module__.startswith(private), (name, export, value.__module__)
                assert getattr(importlib.import_module(value.__module__), export) is value
    old = {
        "nrllm_agents.http.edge.EdgeGuardMiddleware": "nrllm_agents.middleware.EdgeGuardMiddleware",
        "nrllm_agents.workers.rq_worker.GracefulWorker": "nrllm_agents.workers.GracefulWorker",
        "nrllm_agents.workers.threaded.ThreadedWorker": "nrllm_agents.workers.ThreadedWorker",
        "nrllm_agents.catalog.registry.scripted_provider": "nrllm_agents.catalog.scripted_provider",
        "nrllm_agents.domain.errors.ProviderError": "nrllm_agents.providers.ProviderError",
        "nrllm_agents.domain.steps.ModelResponse": "nrllm_agents.providers.ModelResponse",
        "nrllm_agents.access.signin.ThrottledModelBackend": "nrllm_agents.access.ThrottledModelBackend",
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

    from nrllm_agents.catalog.registry import scripted_provider
    from nrllm_agents.workers.rq_worker import GracefulWorker

    assert import_attribute("nrllm_agents.workers.GracefulWorker") is GracefulWorker
    assert import_string("nrllm_agents.catalog.scripted_provider") is scripted_provider
