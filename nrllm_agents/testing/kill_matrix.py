"""The kill matrix's tools (issue 47): three kinds of effect, each of which kills its own worker
process (``SIGKILL``, nothing runs after it) at the point the test chose for its run, once.

- ``ledger``: a transactional tool, a ``Note`` row written through the ORM;
- ``keyed_charge``: an idempotent effect outside the database, a ``POST`` carrying the call's
  idempotency key to the witness API (``keyed_server``);
- ``plain_charge``: a non-idempotent effect outside the database, a ``POST`` the witness applies
  every time (``/unkeyed/``).

Kill points: ``before_effect`` (the tool started, nothing done), ``after_effect`` (done, its step
not recorded) and ``after_record`` (its step committed: a ``step_recorded`` receiver kills the
process). The plan is a directory (``NRLLM_KILL_PLAN``): ``<run id>`` holds the run's kill point;
``<run id>.killed`` is created, exclusively, by the one execution that kills, so a run is killed
once however often its call is made. The witness is at ``NRLLM_KILL_WITNESS``. Test doubles:
named in the settings of a test only (``NRLLM_EXTRA_TOOLS``), never in a deployment's.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Any, ClassVar

import httpx

PLAN = "NRLLM_KILL_PLAN"
WITNESS = "NRLLM_KILL_WITNESS"
POINTS = ("before_effect", "after_effect", "after_record")

_armed: set[str] = set()  # runs of this process to kill once their tool step is committed


def _plan(run_id: Any) -> Path:
    return Path(os.environ[PLAN]) / str(run_id)


def _point(run_id: Any) -> str | None:
    try:
        return _plan(run_id).read_text().strip() or None
    except FileNotFoundError:
        return None


def _first(run_id: Any) -> bool:
    """Whether this is the one execution that kills (the marker did not exist; now it does)."""
    try:
        os.close(os.open(f"{_plan(run_id)}.killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after_record(sender: Any, run_id: Any, sequence: int, kind: str, **kwargs: Any) -> None:
    if kind == "tool" and str(run_id) in _armed:
        _armed.discard(str(run_id))
        _die()


def _listen() -> None:
    """Connect the ``after_record`` kill to the public ``step_recorded`` signal, as a host would."""
    import nrllm_agents

    nrllm_agents.step_recorded.connect(_after_record, weak=False, dispatch_uid="nrllm-kill-matrix")


class _Killing:
    """A tool that makes its effect (``effect``) and kills its process where the plan says."""

    description = "make an effect the kill matrix counts"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    requires_approval = False

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id
        _listen()  # once per process in effect (one dispatch uid)

    def execute(self, arguments: dict[str, Any], context: Any = None) -> Any:
        point = _point(self.run_id)
        killing = point in POINTS and _first(self.run_id)
        if killing and point == "before_effect":
            _die()
        result = self.effect(context)
        if killing and point == "after_effect":
            _die()
        if killing and point == "after_record":
            _armed.add(str(self.run_id))
        return result

    def effect(self, context: Any) -> Any:
        raise NotImplementedError

    def _post(self, path: str, key: str | None) -> Any:
        headers = {"Idempotency-Key": key} if key else {}
        answer = httpx.post(f"{os.environ[WITNESS]}{path}", json={"run": str(self.run_id)}, headers=headers, timeout=30)
        answer.raise_for_status()
        return answer.json()


class Ledger(_Killing):
    name = "ledger"
    transactional = True

    def effect(self, context: Any) -> Any:
        from ..models import Note

        return {"note": Note.objects.create(run_id=self.run_id, title="ledger", body="").pk}


class KeyedCharge(_Killing):
    name = "keyed_charge"

    def effect(self, context: Any) -> Any:
        return self._post("/charges", context.idempotency_key)


class PlainCharge(_Killing):
    name = "plain_charge"
    idempotent = False

    def effect(self, context: Any) -> Any:
        return self._post("/unkeyed/charges", None)


TOOLS = {
    "ledger": f"{__name__}.Ledger",
    "keyed_charge": f"{__name__}.KeyedCharge",
    "plain_charge": f"{__name__}.PlainCharge",
}
