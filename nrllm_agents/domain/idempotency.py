"""Idempotency keys: one per tool call, the same every time that call is executed.

A run continued after a requeue, a lost worker or a hand-back executes again the calls of its
last model turn that have no recorded result, under the model's call ids recorded with that turn
(``replay.rebuild_state``). A key made of the run, the loop round and the call id is therefore
the same on every execution of one call and different for every other call, so an API that
honours idempotency keys applies the effect once however often the call is repeated. The round
is part of it because some servers number their call ids per answer (``call_1`` in every turn).

Plain Python: no Django.
"""

from __future__ import annotations

import uuid

NAMESPACE = uuid.UUID("5b0f4b5e-6c1a-4d0e-9a7e-2f6c8d3a9b10")
"""The UUID namespace of every key; fixed for good, since changing it would change every key."""


def idempotency_key(run_id: uuid.UUID | str, round_: int, call_id: str) -> str:
    """The key of tool call ``call_id`` of loop round ``round_`` in run ``run_id``.

    A UUID (version 5, in its 36-character text form: accepted wherever an API takes an
    ``Idempotency-Key``), opaque and derived only from its three inputs: the same for every
    execution of that call, in any process. Raises ``ValueError`` for a ``run_id`` that is no UUID.
    """
    run = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    return str(uuid.uuid5(NAMESPACE, f"{run}:{int(round_)}:{call_id}"))
