"""docs/howto/tools.md's "Idempotency keys" example, as the page shows it: the block is a host's
``myapp/agent_tools.py``, found at start-up like any app's tools, and calls a local API that
honours ``Idempotency-Key`` (``testing.keyed_server``). A worker lost after the charge and before
its step was recorded: the run is requeued, the call repeated with the same key, and the card
charged once."""

from __future__ import annotations

import re
import sys

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from nrllm_agents import store
from nrllm_agents.catalog import app_tools
from nrllm_agents.domain.idempotency import idempotency_key
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRunEvent
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.testing.keyed_server import KeyedServer
from tests.conftest import ROOT
from tests.integration.runs import expire

PAGE = ROOT / "docs" / "howto" / "tools.md"
FIRST_LINE = "# myapp/agent_tools.py\nimport httpx"

pytestmark = pytest.mark.django_db


@pytest.fixture
def myapp(tmp_path, monkeypatch):
    """The page's block as ``myapp/agent_tools.py`` of an installed app, discovered at start-up."""
    (found,) = [b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if b.startswith(FIRST_LINE)]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "agent_tools.py").write_text(found)
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = override_settings(INSTALLED_APPS=[*django_settings.INSTALLED_APPS, "myapp"])
    installed.enable()
    app_tools.discover()
    yield
    installed.disable()
    app_tools.discover()
    for name in ("myapp.agent_tools", "myapp"):
        sys.modules.pop(name, None)


def test_a_repeated_charge_carries_the_same_key_and_charges_once(runtime, myapp, settings, monkeypatch):
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this test is the worker
    script = [
        {"tool_calls": [{"name": "charge", "arguments": {"customer": "42", "cents": 1999}}]},
        {"content": "charged"},
    ]

    def killed_after_the_charge(step):
        if step["kind"] == "tool":
            raise SystemExit("worker killed")  # before the tool step is recorded

    with KeyedServer() as api:
        settings.PAYMENTS_URL = api.url
        run_id = runtime.enqueue({"prompt": "charge 42", "tools": ["charge"], "script": script})
        with pytest.raises(SystemExit):
            runtime.run_queued(run_id, on_step=killed_after_the_charge)
        expire(run_id)
        assert store.reap().requeued == [run_id]
        done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED, done
    assert api.keys() == [idempotency_key(run_id, 1, "call_1_1")] * 2  # the same call, the same key
    (charge,) = api.effects  # charged once
    assert charge["body"] == {"customer": "42", "amount": 1999}
    (step,) = AgentRunEvent.objects.filter(run_id=run_id, kind="tool").values_list("payload", flat=True)
    assert step["result"] == charge and step["error"] is None
