"""Exceptions of the domain. Control flow ones are BaseException on purpose."""

from __future__ import annotations


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
