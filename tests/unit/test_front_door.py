"""The README is a front door (at most 200 lines) whose links lead somewhere."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_the_readme_is_short_and_its_links_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith("http")]
    assert local and [link for link in local if not (ROOT / link).exists()] == []


def test_every_setting_is_in_the_settings_reference() -> None:
    from nrllm_agents.conf import DEFAULTS

    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    assert [name for name in DEFAULTS if f"| `{name}` |" not in page] == []
