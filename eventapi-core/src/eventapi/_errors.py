"""The exceptions eventapi raises on purpose.

::

    EventApiError                   base of everything raised on purpose
    ├── DriverError                 a backend call failed: .backend .call .code .name .message,
    │                               .not_ready
    ├── EventStateError (ValueError)        misuse caught before the driver: closed, never
    │                                       recorded or foreign handle
    ├── CaptureError                a fence recorded into a stream that is capturing a graph
    ├── UnsupportedError (NotImplementedError)  the backend lacks an optional capability
    └── BackendError
        ├── BackendNotFoundError (LookupError)   no such backend installed
        └── BackendUnavailableError              installed but unusable here (no driver, no device)

A wait that times out raises the built-in :class:`TimeoutError`, as :mod:`concurrent.futures`
does. Subclasses exist only where a caller reacts differently; the rest is said in the message,
which names the fix.

Each class says it belongs to :mod:`eventapi` (its ``__module__``), where users import it from:
a traceback prints ``eventapi.BackendUnavailableError``, and pickle finds the class there.
"""

from __future__ import annotations

from typing import final

__all__ = [
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "CaptureError",
    "DriverError",
    "EventApiError",
    "EventStateError",
    "UnsupportedError",
]


class EventApiError(Exception):
    """Base of every exception eventapi raises on purpose."""

    __module__ = "eventapi"


@final
class DriverError(EventApiError):
    """A backend call failed in the driver.

    ``str()`` reads ``cuda: cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (400): invalid
    resource handle``. ``not_ready`` is true when the driver reported that the work an event
    marks has not been reached yet (``CUDA_ERROR_NOT_READY``, ``hipErrorNotReady``): the only
    failure a caller is expected to retry.
    """

    __module__ = "eventapi"

    def __init__(
        self,
        backend: str,
        call: str,
        code: int,
        name: str,
        message: str,
        *,
        not_ready: bool = False,
    ) -> None:
        self.backend = backend
        self.call = call
        self.code = code
        self.name = name
        self.message = message
        self.not_ready = not_ready
        super().__init__(f"{backend}: {call} failed: {name} ({code}): {message}")

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only `not_ready` is not in self.args; pickle (multiprocessing, logging
        # handlers) must rebuild the whole error, not a bare message.
        return (
            _rebuild_driver_error,
            (self.backend, self.call, self.code, self.name, self.message, self.not_ready),
        )


def _rebuild_driver_error(
    backend: str, call: str, code: int, name: str, message: str, not_ready: bool
) -> DriverError:
    return DriverError(backend, call, code, name, message, not_ready=not_ready)


@final
class EventStateError(EventApiError, ValueError):
    """Misuse caught in Python before any driver call.

    A closed fence or handle, an event that was never recorded, a handle that belongs to
    another backend object. The driver never sees such a handle: on a real device it would be
    undefined behaviour, not an error.
    """

    __module__ = "eventapi"


@final
class CaptureError(EventApiError):
    """An event was to be recorded into a stream that is capturing a graph.

    A record into a capture is no timestamp: the driver makes it a dependency inside the graph,
    and eventapi puts nothing into a graph unasked. Record the fence after the capture ends, or
    into a stream that is not capturing.
    """

    __module__ = "eventapi"


@final
class UnsupportedError(EventApiError, NotImplementedError):
    """The backend lacks an optional capability that this call needs."""

    __module__ = "eventapi"


class BackendError(EventApiError):
    """A backend could not be found or used."""

    __module__ = "eventapi"


@final
class BackendNotFoundError(BackendError, LookupError):
    """No backend of that name is installed; the message lists those that are."""

    __module__ = "eventapi"


@final
class BackendUnavailableError(BackendError):
    """The backend is installed but cannot be used here; the message says why."""

    __module__ = "eventapi"
