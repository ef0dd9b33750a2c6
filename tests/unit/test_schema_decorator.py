"""The API's views describe themselves through ``api.schema.extend_schema``, never
drf-spectacular's own: on a view method that one extends the host's ``DEFAULT_SCHEMA_CLASS``,
DRF's own in a host that never configured drf-spectacular, and its schema page answered 500
(found by the host-project quickstart, ``tests/e2e/install``)."""

from __future__ import annotations

import re
from pathlib import Path

API = Path(__file__).resolve().parents[2] / "nrllm_agents" / "api"


def test_no_api_module_uses_drf_spectacular_s_extend_schema_directly():
    direct = re.compile(r"from drf_spectacular\.utils import [^\n]*\bextend_schema\b(?!_)")
    offenders = [p.name for p in API.glob("*.py") if p.name != "schema.py" and direct.search(p.read_text())]
    assert offenders == []
