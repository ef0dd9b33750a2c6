"""Exceptions of the domain. Control flow ones are BaseException on purpose.

An error a caller can be told about carries a ``Kind`` (``KindedError``); no error here knows
HTTP. The surfaces map a kind to their own medium in one place (``http/answers.STATUS``).
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar


class Kind(enum.StrEnum):
    """What kind of refusal an error is, whatever surface says it."""

    NOT_FOUND = "not_found"  # no such subject, or one the caller may not see
    FORBIDDEN = "forbidden"  # a subject the caller sees but may not act on
    CONFLICT = "conflict"  # the subject is not in a state for the action
    INVALID = "invalid"  # the request cannot be taken as it is
    UNAVAILABLE = "unavailable"  # something the action needs refused it; try again later
    TOO_MANY = "too_many"  # a rate limit or a cap refused


class KindedError(Exception):
    """An error with a ``kind``: its message is what the caller is told.

    ``subject()`` names what the error is about (ids, a status) for a machine; ``sentence()`` is
    the short sentence a page shows. Both default to nothing more than the message.
    """

    kind: ClassVar[Kind]

    def subject(self) -> dict[str, Any]:
        return {}

    def detail(self) -> str:
        return str(self)

    def sentence(self) -> str:
        return self.detail()


class RunCancellationRequested(BaseException):
    """The run was cancelled; the loop stops at this step boundary.

    A ``BaseException`` so that a tool or provider catching ``Exception`` can never
    swallow it: it travels straight up to the runtime's ladder.
    """

    def __init__(self, message: str | None = None, *, boundary_sequence: int | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).splitlines()[0])
        self.boundary_sequence = boundary_sequence


class RunLeaseLost(BaseException):
    """This segment no longer owns the run (its lease expired and it was reaped); it stops silently.

    Nothing more is written: not the step in flight, not a settle. The new owner continues.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).splitlines()[0])


class SegmentInterrupted(BaseException):
    """The process is shutting down (SIGTERM); the run is handed back to the queue at this boundary."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).splitlines()[0])


class ProviderError(Exception):
    """The model provider failed to answer."""

    def __init__(self, message: str | None = None, *, retryable: bool = False, status_code: int | None = None) -> None:
        super().__init__(message or self.__doc__)
        self.retryable = retryable
        self.status_code = status_code


class ToolError(Exception):
    """A tool refused its input; the message is fed back to the model, the run goes on."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class ConfigurationError(Exception):
    """A provider or tool is unknown or misconfigured."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)
