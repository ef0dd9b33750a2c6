"""MkDocs hook: the REST API reference is built from the OpenAPI schema the app serves
(drf-spectacular, with the same settings as ``api/schema/``) each time the docs are built, so the
page cannot drift from the code. A page asks for it with the marker ``<!-- openapi -->``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- openapi -->"
ROOT = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    import django

    django.setup()
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from nrllm_agents.api.schema import SCHEMA_SETTINGS

    with patched_settings(SCHEMA_SETTINGS):
        return SchemaGenerator().get_schema(request=None, public=True)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _render(schema: dict[str, Any]) -> str:
    out: list[str] = [
        f"Version {schema['info']['version']}. Paths are shown where the demo site mounts the app; a host "
        "project puts its own prefix (`agents/`) in front. Every endpoint needs a signed-in user "
        "(`Authorization: Token <key>` or a session with its CSRF token). The live schema is at "
        "`api/schema/`, and the interactive docs at `api/docs/`.",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            tag = (operation.get("tags") or ["other"])[0]
            by_tag.setdefault(tag, []).append((method.upper(), path, operation))
    for tag in sorted(by_tag):
        out += [f"## {tag}", "", "| method | path | what it does |", "| --- | --- | --- |"]
        for method, path, operation in by_tag[tag]:
            out.append(f"| `{method}` | `{path}` | {_cell(operation.get('summary', ''))} |")
        out.append("")
        for method, path, operation in by_tag[tag]:
            out += [f"### `{method} {path}`", "", str(operation.get("description", "")).strip(), ""]
            params = operation.get("parameters") or []
            if params:
                out += ["| parameter | in | what |", "| --- | --- | --- |"]
                for p in params:
                    out.append(f"| `{p['name']}` | {p['in']} | {_cell(p.get('description', ''))} |")
                out.append("")
            codes = ", ".join(
                f"`{code}` {_cell(r.get('description', ''))}" for code, r in operation["responses"].items()
            )
            out += [f"Answers: {codes}", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _render(_schema()))
