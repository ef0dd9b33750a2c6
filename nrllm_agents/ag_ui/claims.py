"""The run ids AG-UI clients choose, and their Stop, which may arrive first.

A client names its run (``RunAgentInput.runId``) before we have one. Its row (``ClientRun``,
per user) is the lock both sides take: the start creates the run under it, the Stop marks it.
Whichever comes second sees the other: a start that finds a Stop cancels the run it has just
created, in the same transaction (no worker ever sees it queued); a Stop that finds a run cancels
it. Both go through the one guarded cancel, source ``ag-ui``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import CancelSource, ClientRun
from ..presentation.outcomes import CancelResult
from ..runtime.agent_runtime import AgentRuntime

REASON = "stopped from an AG-UI client"


def _locked(owner: Any, client_run_id: str) -> ClientRun:
    """The client id's row, created if new, locked until the transaction ends."""
    found = ClientRun.objects.select_for_update().filter(owner=owner, client_run_id=client_run_id).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            ClientRun.objects.create(owner=owner, client_run_id=client_run_id)
    except IntegrityError:
        pass  # created by the other side meanwhile: lock theirs
    return ClientRun.objects.select_for_update().get(owner=owner, client_run_id=client_run_id)


def run_of(owner: Any, client_run_id: str) -> Any:
    """Our run the client id names, or None."""
    return ClientRun.objects.filter(owner=owner, client_run_id=client_run_id).values_list("run_id", flat=True).first()


def start(runtime: AgentRuntime, owner: Any, client_run_id: str, create: Callable[[], Any]) -> tuple[Any, bool]:
    """The run ``client_run_id`` names: ``(run id, False)`` when it named one already (a
    reattach), else ``(create(), True)``, cancelled at once when a Stop came first."""
    with transaction.atomic():
        claim = _locked(owner, client_run_id)
        if claim.run_id is not None:
            return claim.run_id, False
        run_id = create()
        claim.run_id = run_id
        claim.save(update_fields=["run"])
        if claim.cancel_requested_at is not None:
            runtime.cancel(run_id, by=owner, source=CancelSource.AG_UI, reason=REASON)
        return run_id, True


def stop(runtime: AgentRuntime, owner: Any, client_run_id: str, run_id: Any = None) -> CancelResult | None:
    """Stop the run ``client_run_id`` names (or ``run_id``, one of ours): cancelled now, or,
    when it does not exist yet, as soon as it does (None)."""
    with transaction.atomic():
        claim = _locked(owner, client_run_id)
        if claim.run_id is None and run_id is not None:
            claim.run_id = run_id
        if claim.cancel_requested_at is None:
            claim.cancel_requested_at = timezone.now()
        claim.save(update_fields=["run", "cancel_requested_at"])
        if claim.run_id is None:
            return None
        return runtime.cancel(claim.run_id, by=owner, source=CancelSource.AG_UI, reason=REASON)
