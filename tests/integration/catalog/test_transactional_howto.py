"""docs/howto/tools.md's "Writes that commit with their step", as the page shows it: its two blocks
are a host app's ``myapp/models.py`` and ``myapp/agent_tools.py``, the tool found at start-up like
any app's. A worker lost after the refund's write and before its step committed leaves no row;
the run is requeued, the call made again, and the refund written once in all. The page's check
(``nrllm_agents.E024``) passes for it."""

from __future__ import annotations

import re
import sys

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from nrllm_agents import checks, store
from nrllm_agents.catalog import app_tools
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRunEvent
from nrllm_agents.runtime.agent_runtime import Outcome
from tests.conftest import ROOT
from tests.integration.runs import expire

PAGE = ROOT / "docs" / "howto" / "tools.md"

pytestmark = pytest.mark.django_db(transaction=True)


def block(first_line: str) -> str:
    (found,) = [b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if b.startswith(first_line)]
    return found


@pytest.fixture
def refunds(tmp_path, monkeypatch):
    """The page's blocks as ``myapp``, installed, with its table; the ``Refund`` model."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "models.py").write_text(block("# myapp/models.py\n"))
    (tmp_path / "myapp" / "agent_tools.py").write_text(
        block("# myapp/agent_tools.py\nfrom nrllm_agents import ToolError")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = override_settings(INSTALLED_APPS=[*django_settings.INSTALLED_APPS, "myapp"])
    installed.enable()
    refund = apps.get_model("myapp", "Refund")
    with connection.schema_editor() as editor:
        editor.create_model(refund)
    app_tools.discover()
    yield refund
    with connection.schema_editor() as editor:
        editor.delete_model(refund)
    installed.disable()
    app_tools.discover()
    for name in ("myapp.agent_tools", "myapp.models", "myapp"):
        sys.modules.pop(name, None)
    apps.all_models.pop("myapp", None)


def test_a_refund_whose_worker_was_lost_before_the_commit_is_written_once(runtime, refunds, monkeypatch):
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this test is the worker
    arguments = {"order": "A-1001", "cents": 1250, "reason": "the box arrived crushed"}
    script = [{"tool_calls": [{"name": "refund", "arguments": arguments}]}, {"content": "refunded"}]

    def killed_before_the_commit(step):
        if step["kind"] == "tool":
            assert refunds.objects.count() == 1  # written, in the transaction not yet committed
            raise SystemExit("worker killed")

    run_id = runtime.enqueue({"prompt": "refund A-1001", "tools": ["refund"], "script": script})
    with pytest.raises(SystemExit):
        runtime.run_queued(run_id, on_step=killed_before_the_commit)
    assert refunds.objects.count() == 0  # rolled back with the step it never recorded
    assert not AgentRunEvent.objects.filter(run_id=run_id, kind="tool").exists()
    expire(run_id)
    assert store.reap().requeued == [run_id]
    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED, done
    (row,) = refunds.objects.values("pk", "order", "cents", "reason")
    assert row == {"pk": row["pk"], **arguments}
    (step,) = AgentRunEvent.objects.filter(run_id=run_id, kind="tool").values_list("payload", flat=True)
    assert step["result"] == {"refund": row["pk"], "cents": 1250} and step["error"] is None


def test_a_refund_the_model_got_wrong_writes_nothing(runtime, refunds):
    script = [
        {"tool_calls": [{"name": "refund", "arguments": {"order": "A-1", "cents": 0, "reason": "x"}}]},
        {"content": "could not"},
    ]
    result = runtime.run({"prompt": "refund", "tools": ["refund"], "script": script})
    assert result.outcome == Outcome.COMPLETED and refunds.objects.count() == 0
    (step,) = AgentRunEvent.objects.filter(run_id=result.run_id, kind="tool").values_list("payload", flat=True)
    assert step["error"] == "cents must be positive" and step["rolled_back"] is True


def test_the_page_s_tool_passes_its_check(refunds):
    assert app_tools.tools()["refund"].tool.transactional is True
    assert checks.check_transactional_tools() == []
