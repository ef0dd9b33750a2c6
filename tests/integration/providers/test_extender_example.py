"""The extender's example of docs/howto/extend.md, run as the page shows it: a provider and a
middleware written against the public modules only, plugged in by the page's settings, and a
run with the provider on the in-process runtime."""

from __future__ import annotations

import ast
import re
import sys
import types
import typing

import pytest
from django.test import Client

import nrllm_agents
from nrllm_agents.models import AgentRunEvent
from tests.conftest import ROOT
from tests.unit.test_public_paths import PUBLIC

PAGE = ROOT / "docs" / "howto" / "extend.md"

pytestmark = pytest.mark.django_db


def block(first_line: str) -> str:
    """The page's python code block that starts with ``first_line``."""
    found = [b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if b.startswith(first_line)]
    assert len(found) == 1, first_line
    return found[0]


@pytest.fixture
def extending(monkeypatch, settings):
    """``myproject.extending`` made of the page's code, and the page's settings applied."""
    code = block("# myproject/extending.py")
    module = types.ModuleType("myproject.extending")
    exec(compile(code, str(PAGE), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "myproject", types.ModuleType("myproject"))
    monkeypatch.setitem(sys.modules, "myproject.extending", module)
    host = {"MIDDLEWARE": list(settings.MIDDLEWARE)}
    exec(block("# settings.py"), host)
    settings.NRLLM_AGENTS = host["NRLLM_AGENTS"]
    settings.MIDDLEWARE = host["MIDDLEWARE"]
    return code


def test_the_example_imports_only_public_modules(extending):
    imported = set()
    for node in ast.walk(ast.parse(extending)):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert imported == {"json", "nrllm_agents", "nrllm_agents.providers"} and (imported - {"json"}) <= set(PUBLIC)
    # the factory is annotated with the public RunRequest, the type a provider factory receives
    factory = sys.modules["myproject.extending"].sum_provider
    assert typing.get_type_hints(factory)["request"] is nrllm_agents.RunRequest


def test_a_run_with_the_example_provider_calls_the_tool_and_answers(extending):
    result = nrllm_agents.run("What is 6*7?", provider="sums", tools=["calculator"])
    assert (result.status, result.final_text) == ("completed", "6*7 = 42")
    assert [e.kind for e in AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence")] == [
        "request",
        "llm",
        "tool",
        "request",
        "llm",
    ]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (22, 7)


def test_the_example_provider_raising_provider_error_fails_the_run_saying_why(extending):
    result = nrllm_agents.run("What is 6*7?", provider="sums", tools=[])
    assert (result.status, result.termination_reason) == ("failed", "provider_failed")
    assert "needs the calculator" in (result.error or "")


def test_the_example_middleware_answers_behind_the_public_edge_guard(extending, settings):
    assert settings.MIDDLEWARE[1:3] == [
        "nrllm_agents.middleware.EdgeGuardMiddleware",
        "myproject.extending.AgentVersionMiddleware",
    ]
    response = Client().get("/no-such-page/")
    assert response["X-Agents-Version"] == nrllm_agents.__version__
    # the public edge guard, outside it, answers a NUL in the query before the request reaches it
    refused = Client().get("/no-such-page/", {"q": "a\x00b"})
    assert refused.status_code == 400 and "X-Agents-Version" not in refused
