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


@final
class DriverError(EventApiError):
    """A backend call failed in the driver.

    ``str()`` reads ``cuda: cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (400): invalid
    resource handle``. ``not_ready`` is true when the driver reported that the work an event
    marks has not been reached yet (``CUDA_ERROR_NOT_READY``, ``hipErrorNotReady``): the only
    failure a caller is expected to retry.
    """

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
        # Pickle (multiprocessing, logging handlers) must rebuild the whole error, not a bare
        # message: self.args holds only the message. Keyword-only `not_ready` comes back with
        # the rest of the instance's __dict__, which BaseException.__setstate__ restores.
        fields = (self.backend, self.call, self.code, self.name, self.message)
        return DriverError, fields, self.__dict__


@final
class EventStateError(EventApiError, ValueError):
    """Misuse caught in Python before any driver call.

    A closed fence or handle, an event that was never recorded, a handle that belongs to
    another backend object. The driver never sees such a handle: on a real device it would be
    undefined behaviour, not an error.
    """


@final
class CaptureError(EventApiError):
    """An event was to be recorded into a stream that is capturing a graph.

    A record into a capture is no timestamp: the driver makes it a dependency inside the graph,
    and eventapi puts nothing into a graph unasked. Record the fence after the capture ends, or
    into a stream that is not capturing.
    """


@final
class UnsupportedError(EventApiError, NotImplementedError):
    """The backend lacks an optional capability that this call needs."""


class BackendError(EventApiError):
    """A backend could not be found or used."""


@final
class BackendNotFoundError(BackendError, LookupError):
    """No backend of that name is installed; the message lists those that are."""


@final
class BackendUnavailableError(BackendError):
    """The backend is installed but cannot be used here; the message says why."""


# Every class says it belongs to eventapi (the module docstring says why).
for _name in __all__:
    globals()[_name].__module__ = "eventapi"
