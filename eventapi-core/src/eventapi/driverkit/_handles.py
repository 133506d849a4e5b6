"""The handles a :class:`~eventapi.driverkit.DriverBackend` gives out: events and streams.

Each wraps the driver's own handle with the state the backend object keeps for it under its
lock: closed or not, how many calls use it, who owns it. Part of :mod:`eventapi.driverkit`,
which users import these from, and which documents them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar, final

from .._errors import EventStateError
from .._single_owner import SingleOwner

if TYPE_CHECKING:
    from ._backend import DriverBackend

__all__ = ["OWED", "RE", "RS", "Event", "LiveHandles", "Stream"]

RE = TypeVar("RE")
RS = TypeVar("RS")


class LiveHandles(NamedTuple):
    """Handles a backend object created and has not destroyed yet."""

    events: int
    streams: int


# What _Handle._users holds, instead of a count of calls under way, once the handle is counted
# gone and its destroy claimed, until the wrapper is dropped. The destroy takes the driver
# handle out of the wrapper right before the driver releases it, so a wrapper left OWED by an
# interrupt still holds it, and its finalizer releases it; one released holds None.
OWED: Final = -2


class _Handle(SingleOwner):
    """State shared by event and stream handles; guarded by the owning backend's lock.

    ``_raw`` is the driver's handle, or None before the driver's create returned and once the
    driver's destroy took it (a raw handle is never None).
    """

    __slots__ = ("__weakref__", "_closed", "_owned", "_owner", "_raw", "_users")

    # One driver handle, one owner: a copy would be a second owner whose finalizer destroys the
    # handle under the first (a use-after-free on a real device), and a pickle would carry a
    # pointer into another process, where it means nothing.
    _COPY_HINT = "pass the same handle around instead, in the process that created it"

    _raw: Any
    _owner: DriverBackend[Any, Any]

    def __init__(self, owner: DriverBackend[Any, Any], raw: object = None) -> None:
        # Built without its driver handle, a handle is one the backend creates and releases
        # (every event, a stream from stream_create_non_blocking): it starts closed, and is
        # opened and counted in one step before its driver call (DriverBackend._create). Built
        # with one, it is an adopted stream: open at once, never counted, never released.
        self._owned = raw is None
        self._owner = owner
        self._raw = raw
        self._closed = raw is None
        # Calls under way with this handle; a destroy waits for them to leave (see _leave).
        self._users = 0

    @property
    def closed(self) -> bool:
        """True once the handle was destroyed. An adopted stream is never closed here."""
        return self._closed

    @property
    def backend(self) -> str:
        """The name of the backend this handle belongs to."""
        return self._owner.BACKEND

    def __del__(self) -> None:
        # Safety net for a handle dropped without its destroy, or whose destroy an interrupt
        # left owed (see DriverBackend._collect); never raises. Every destroyed handle comes
        # here, released already (closed, its driver handle taken), and so does an adopted
        # stream, which is not eventapi's to release: both return at once.
        #
        # It asks its backend object whether the interpreter is shutting down
        # (DriverBackend._is_finalizing), and stays silent then; it reads no module global
        # first: at shutdown the module's globals may be gone already. It reads the slots under
        # ``except AttributeError``: an object whose __init__ was interrupted (or never ran) has
        # only some of them set, and a finalizer must not raise for it (one that has _closed
        # has its owner too, and nothing to release yet).
        try:
            if (self._closed and self._raw is None) or not self._owned:
                return
        except AttributeError:
            return
        if not type(self._owner)._is_finalizing():
            self._owner._collect(self)


@final
class Event(_Handle, Generic[RE]):
    """An event handle of a :class:`DriverBackend`. Users receive it; they never build one.

    It may be passed between threads freely. ``recorded`` turns true after the first successful
    record and stays true: an event re-recorded marks the latest record, as in CUDA. It cannot
    be copied or pickled (:class:`TypeError`).
    """

    __slots__ = ("_recorded",)

    _raw: RE

    def __init__(self, owner: DriverBackend[RE, Any]) -> None:
        super().__init__(owner)
        self._recorded = False

    @property
    def recorded(self) -> bool:
        """True once the event was recorded into a stream."""
        return self._recorded

    def __repr__(self) -> str:
        if self._closed:  # its driver handle is given up as the driver destroys it
            return f"<{self.backend} event closed>"
        state = "recorded" if self._recorded else "new"
        return f"<{self.backend} event {self._raw!r} {state}>"


@final
class Stream(_Handle, Generic[RS]):
    """A stream handle of a :class:`DriverBackend`. Users receive it; they never build one.

    ``owned`` is true for a stream the backend created, which :meth:`DriverBackend.stream_destroy`
    releases; an adopted stream (a framework's, or a raw handle) is never destroyed by eventapi.
    It cannot be copied or pickled (:class:`TypeError`).
    """

    __slots__ = ()

    _raw: RS

    @property
    def owned(self) -> bool:
        """True when this backend created the stream and will destroy it."""
        return self._owned

    @property
    def raw(self) -> RS:
        """The driver's own handle, for passing to the framework that launches work.

        Reading it on a destroyed stream raises :class:`~eventapi.EventStateError`: its handle
        means nothing then, and the driver may give the same value to a stream made later.
        """
        if self._closed:
            raise EventStateError(
                f"{self!r}.raw refused: the stream was destroyed, so its handle means nothing; "
                "use a live stream"
            )
        return self._raw

    def __repr__(self) -> str:
        kind = "stream" if self._owned else "adopted stream"
        if self._closed:  # its driver handle is given up as the driver destroys it
            return f"<{self.backend} {kind} closed>"
        return f"<{self.backend} {kind} {self._raw!r}>"
