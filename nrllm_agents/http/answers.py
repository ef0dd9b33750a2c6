"""The one mapping of policy verdicts and domain errors to HTTP: a status and a body with ``detail``.

Like DRF's ``exception_handler``: views do not each ``try/except`` the same errors and pick a
status. The REST API lets the errors below propagate and its handler (``api.errors``) answers
``for_error``; the playground (HTML and JSON) and the browser stream ask ``refusal`` and
``for_error`` too, and say the answer in their own way (a page, a message, JSON).

- A run (or thread) the caller may not see: 404, the same body as one that does not exist
  (and as a malformed id), so refusing never tells whether it exists.
- A visible one the caller may not act on: 403 with the policy's refusal.
- Not in a state for the action (a fork of an active run, a message to a busy thread that said
  ``reject``, an approval of a run not waiting): 409.
- A queue that refused the run for good (it was settled ``failed``, ``enqueue_failed``): 503.
- An invalid run request: 400, field -> list of messages.
- A rate limit or a cap (``admission``) that refused: 429 with ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import JsonResponse

from ..access import policy
from ..domain.errors import Kind, KindedError
from ..presentation.outcomes import RUN_NOT_FOUND
from ..runtime.threads import THREAD_NOT_FOUND
from ..validation.run_request import InvalidRequest

__all__ = ["FORBIDDEN", "NOT_FOUND", "RUN_NOT_FOUND", "STATUS", "THREAD_NOT_FOUND", "Answer", "Refused", "for_error"]

NOT_FOUND = "Not found."
FORBIDDEN = "You do not have permission to perform this action."  # DRF's own words

# The one table from an error's kind to its HTTP status.
STATUS: dict[Kind, int] = {
    Kind.NOT_FOUND: 404,
    Kind.FORBIDDEN: 403,
    Kind.CONFLICT: 409,
    Kind.INVALID: 400,
    Kind.UNAVAILABLE: 503,
    Kind.TOO_MANY: 429,
}


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: ``status``, the JSON ``body`` (``detail`` and what names the subject),
    and ``message``, the sentence a page or a flash message shows for it."""

    status: int
    body: dict[str, Any]
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        return str(self.body.get("detail", self.message))


class Refused(Exception):  # noqa: N818 (an answer, not a failure)
    """Raised by a DRF view for a policy refusal; the API's handler answers its ``answer``."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.detail)
        self.answer = answer


def refusal(verdict: policy.Verdict, action: policy.Action, *, not_found: str = NOT_FOUND) -> Answer | None:
    """``None`` when the policy allowed ``action``; else 404 (``not_found``) for a subject the
    caller may not see, 403 with the policy's refusal for one they see but may not act on."""
    if verdict == policy.Verdict.ALLOWED:
        return None
    if verdict == policy.Verdict.NOT_FOUND:
        return Answer(404, {"detail": not_found}, not_found)
    detail = policy.REFUSALS.get(action, FORBIDDEN)
    return Answer(403, {"detail": detail}, detail)


def too_many(detail: str, wait: int) -> Answer:
    """429: a rate limit or a cap on open streams or runs refused the request; retry after ``wait`` s."""
    return Answer(429, {"detail": detail}, detail, {"Retry-After": str(wait)})


def for_error(exc: BaseException) -> Answer | None:
    """The answer to an error with a kind (``domain.errors.KindedError``), or to ``Refused``;
    ``None`` for any other exception.

    ``message`` is the playground's sentence; ``body`` is what the API (and a script) reads:
    ``detail`` and what names the subject, or, for an invalid request, each field's messages.
    """
    if isinstance(exc, Refused):
        return exc.answer
    if not isinstance(exc, KindedError):
        return None
    if isinstance(exc, InvalidRequest):
        body: dict[str, Any] = {name: [message] for name, message in exc.errors.items()}
    else:
        body = {"detail": exc.detail(), **exc.subject()}
    return Answer(STATUS[exc.kind], body, exc.sentence())


def json_response(answer: Answer) -> JsonResponse:
    """The answer as a Django ``JsonResponse`` (the playground's scripts, the browser stream)."""
    response = JsonResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response
