"""``agent_approve`` on the root of a tree decides the approval a run below it waits for; with
several waiting it names them and changes nothing, and ``--run`` picks one (issue 36).

``transaction=True``: the children run on executor threads with connections of their own.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nrllm_agents.models import AgentRun, RunStatus
from tests import waits
from tests.integration.api.test_tree_approvals import gated_tree
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_agent_approve_on_the_root_decides_the_approval_waiting_below_it(runtime, no_redis):  # noqa: F811
    root_id, children = gated_tree(runtime, None, children=2)
    with pytest.raises(CommandError) as refused:
        call_command("agent_approve", str(root_id), "--approve", stdout=StringIO())
    assert refused.value.returncode == 1 and all(str(pk) in str(refused.value) for pk in children)
    assert all(AgentRun.objects.get(pk=pk).status == RunStatus.WAITING_FOR_APPROVAL for pk in children)
    out = StringIO()
    call_command("agent_approve", str(root_id), "--deny", "--run", str(children[0]), stdout=out)
    assert f"deciding the approval of run {children[0]}" in out.getvalue()
    out = StringIO()
    call_command("agent_approve", str(root_id), "--approve", stdout=out)  # the one left
    assert f"deciding the approval of run {children[1]}" in out.getvalue()
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "boss done")
