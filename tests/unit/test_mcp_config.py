"""MCP configuration, tool names and the tool adapter's defaults: no server, no database."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types

from nrllm_agents.domain.errors import ConfigurationError, ToolError
from nrllm_agents.mcp import config
from nrllm_agents.mcp.names import VALID, tool_name, unique
from nrllm_agents.mcp.tool import McpTool
from tests.conftest import ROOT


def test_the_mcpservers_shape_gives_stdio_and_http_servers():
    servers = config.parse(
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server"], "env": {"A": "b"}, "timeout": 5},
                "remote": {"type": "http", "url": "https://example.test/mcp", "headers": {"X-Key": "${KEY}"}},
                "off": {"command": "x", "disabled": True},
            }
        },
        origin="test",
    )
    assert set(servers) == {"files", "remote"}
    assert servers["files"].transport == config.STDIO and servers["files"].args == ("-y", "server")
    assert servers["files"].timeout == 5.0
    assert servers["remote"].transport == config.HTTP and servers["remote"].headers == {"X-Key": "${KEY}"}
    # The inner mapping alone is accepted too (NRLLM_AGENTS["MCP_SERVERS"] written either way).
    assert set(config.parse({"files": {"command": "npx"}}, origin="test")) == {"files"}


@pytest.mark.parametrize(
    "entry, says",
    [
        ({"command": "a", "url": "http://x"}, "either command"),
        ({}, "either command"),
        ({"url": "ftp://x"}, "http:// or https://"),
        ({"command": ""}, "non-empty"),
        ({"command": "a", "args": "x"}, "args must be a list"),
        ({"command": "a", "env": {"A": 1}}, "env must be an object of strings"),
        ({"command": "a", "timeout": -1}, "timeout must be a positive"),
        ({"command": "a", "approval": "yes"}, "approval must be"),
        ({"command": "a", "type": "sse"}, "not supported"),
    ],
)
def test_a_malformed_server_is_named_with_what_is_wrong(entry, says):
    with pytest.raises(ConfigurationError, match=re.escape(says)) as caught:
        config.parse({"mcpServers": {"bad": entry}}, origin="here")
    assert "here: MCP server 'bad'" in str(caught.value)


def test_secrets_come_from_the_environment_and_are_masked(monkeypatch):
    monkeypatch.setenv("NRLLM_TEST_TOKEN", "s3cr3t-value")
    server = config.parse(
        {
            "s": {
                "url": "http://h/mcp?k=${NRLLM_TEST_TOKEN}",
                "headers": {"Authorization": "Bearer ${NRLLM_TEST_TOKEN}"},
            }
        },
        origin="t",
    )["s"]
    assert "s3cr3t" not in repr(server) and "s3cr3t" not in server.where()
    resolved = server.resolved()
    assert resolved.headers["Authorization"] == "Bearer s3cr3t-value"
    assert resolved.redact(f"failed to reach {resolved.url}") == "failed to reach http://h/mcp?k=***"
    monkeypatch.delenv("NRLLM_TEST_TOKEN")
    with pytest.raises(ConfigurationError, match="environment variable NRLLM_TEST_TOKEN is not set"):
        server.resolved()


def test_a_config_file_that_is_missing_or_not_json_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot be read"):
        config.load_file(str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        config.load_file(str(tmp_path / "bad.json"))


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=120))
def test_every_offered_name_is_valid_for_every_provider(server, tool):
    assert VALID.match(tool_name(server, tool))


def test_names_are_readable_and_never_collide():
    assert tool_name("everything", "trigger-long-running-operation") == "everything__trigger-long-running-operation"
    assert tool_name("1st", "a.b") == "mcp_1st__a_b"
    long = tool_name("s", "x" * 200)
    assert len(long) == 64 and VALID.match(long)
    names = unique({("s", "a.b"): tool_name("s", "a.b"), ("s", "a/b"): tool_name("s", "a/b")})
    assert len(set(names.values())) == 2 and all(VALID.match(n) for n in names.values())


def remote(name: str, annotations: types.ToolAnnotations | None = None, schema: dict | None = None) -> types.Tool:
    return types.Tool(
        name=name,
        description=f"{name} tool",
        input_schema=schema or {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        annotations=annotations,
    )


def test_annotations_set_approval_and_idempotence_unless_configured():
    server = config.parse({"s": {"command": "x"}}, origin="t")["s"]
    destructive = McpTool("s__d", server, remote("d", types.ToolAnnotations(destructive_hint=True)))
    read_only = McpTool("s__r", server, remote("r", types.ToolAnnotations(read_only_hint=True)))
    plain = McpTool("s__p", server, remote("p"))
    assert destructive.requires_approval and not destructive.idempotent
    assert not read_only.requires_approval and read_only.idempotent
    assert not plain.requires_approval and not plain.idempotent  # unknown effects: a write fence
    configured = config.parse({"s": {"command": "x", "approval": {"d": False, "p": True}}}, origin="t")["s"]
    assert not McpTool("s__d", configured, remote("d", types.ToolAnnotations(destructive_hint=True))).requires_approval
    assert McpTool("s__p", configured, remote("p")).requires_approval


def test_arguments_are_checked_against_the_input_schema_before_anything_is_sent():
    server = config.parse({"s": {"command": "/nonexistent"}}, origin="t")["s"]
    tool = McpTool("s__t", server, remote("t"))
    with pytest.raises(ToolError, match="inputSchema at n: 'x' is not of type 'integer'"):
        tool.execute({"n": "x"})
    with pytest.raises(ToolError, match="'n' is a required property"):
        tool.execute({})


def test_the_core_of_the_mcp_package_imports_no_django():
    for name in ("config", "names", "session", "client", "tool", "guard"):
        tree = ast.parse((ROOT / "nrllm_agents" / "mcp" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n == "django" or n.startswith("django.") for n in names), name
                assert not any(n.startswith("nrllm_agents.mcp.catalog") or n == "catalog" for n in names), name


def test_an_interrupted_mcp_step_reads_with_the_progress_it_had_made():
    from nrllm_agents.presentation.describe import lines

    payload = {
        "name": "ours__slow",
        "arguments": {},
        "result": None,
        "error": None,
        "interrupted": True,
        "progress": [
            {"progress": 1, "total": 30, "message": "step 1"},
            {"progress": 3, "total": 30, "message": "step 3"},
        ],
    }
    assert ("progress", "3 / 30 step 3") in lines("tool", payload)
    told = {**payload, "mcp": {"server": "ours", "tool": "slow", "cancelled_at": "2026-12-01T22:00:00.123+00:00"}}
    assert ("MCP server told", "2026-12-01T22:00:00.123+00:00") in lines("tool", told)
    assert not [label for label, _ in lines("tool", {**payload, "progress": []}) if label == "progress"]
