"""The handles a :class:`~eventapi.driverkit.DriverBackend` gives out: events and streams.

Each wraps the driver's own handle with the state the backend object keeps for it under its
lock: closed or not, how many calls use it, who owns it. Part of :mod:`eventapi.driverkit`,
which users import these from, and which documents them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, NoReturn, TypeVar, final

from .._errors import EventStateError

if TYPE_CHECKING:
    from ._backend import DriverBackend

__all__ = [
    "NO_RAW",
    "RE",
    "RS",
    "Event",
    "LiveHandles",
    "Stream",
    "handle_slots",
    "raw_store",
    "raw_take",
]

RE = TypeVar("RE")
RS = TypeVar("RS")


class LiveHandles(NamedTuple):
    """Handles a backend object created and has not destroyed yet."""

    events: int
    streams: int


@final
class _NoRaw:
    """The raw handle of a wrapper whose driver create has not returned yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not created>"


NO_RAW: Final = _NoRaw()

# What _Handle._users holds besides a count of calls under way: a wrapper whose driver handle
# is released, or handed on (to the spares), so that its finalizer has nothing to do; and one
# counted gone and claimed by a destroy that has not released its driver handle yet. The
# destroy takes the driver handle out of the wrapper as the driver releases it (raw_take), so
# a wrapper left OWED by an interrupt still holds it, and its finalizer releases it.
RELEASED: Final = -1
OWED: Final = -2


class _Handle:
    """State shared by event and stream handles; guarded by the owning backend's lock."""

    __slots__ = ("__weakref__", "_closed", "_owner", "_raw", "_users")

    _raw: Any
    _owner: DriverBackend[Any, Any] | None

    def __init__(self, raw: object, owner: DriverBackend[Any, Any] | None, *, opened: bool) -> None:
        self._raw = raw
        self._owner = owner
        # A handle the backend creates starts closed, and is opened and counted in one step
        # (DriverBackend._open) before its driver call: see stream_create_non_blocking.
        self._closed = not opened
        # Calls under way with this handle; a destroy waits for them to leave (see _leave).
        self._users = 0

    @property
    def closed(self) -> bool:
        """True once the handle was destroyed. An adopted stream is never closed here."""
        return self._closed

    @property
    def backend(self) -> str:
        """The name of the backend this handle belongs to."""
        return self._owner.BACKEND if self._owner is not None else "?"

    # One driver handle, one owner: a copy would be a second owner whose finalizer destroys the
    # handle under the first (a use-after-free on a real device), and a pickle would carry a
    # pointer into another process, where it means nothing.

    def __copy__(self) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be copied: a driver handle has exactly one owner; "
            "pass the same object around instead"
        )

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be pickled: a driver handle is valid only in the process that "
            "created it; create the handle in the process that uses it"
        )

    # The finalizers ask their backend object whether the interpreter is shutting down
    # (DriverBackend._is_finalizing), and stay silent then; they read no module global first: at
    # shutdown the module's globals may be gone already (None in the pure modules, freed under
    # the compiled ones). They read every slot with getattr or under ``except AttributeError``:
    # an object whose __init__ was interrupted (or never ran) has only some of them set, and a
    # finalizer must not raise for it.


@final
class Event(_Handle, Generic[RE]):
    """An event handle of a :class:`DriverBackend`. Users receive it; they never build one.

    It may be passed between threads freely. ``recorded`` turns true after the first successful
    record and stays true: an event re-recorded marks the latest record, as in CUDA. It cannot
    be copied or pickled (:class:`TypeError`).
    """

    __slots__ = ("_reached", "_recorded", "_spare")

    _raw: RE

    def __init__(self, raw: RE, owner: DriverBackend[RE, Any], *, opened: bool = False) -> None:
        # _Handle.__init__'s assignments, made here: a fence creates an event per record.
        self._raw = raw
        self._owner = owner
        self._closed = not opened
        self._users = 0
        self._recorded = False
        # A fence's event (event_record_new): its driver event may be kept for reuse when it
        # is destroyed (DriverBackend.SPARE_EVENTS), if by then its latest record was seen
        # reached (HIP leaves re-recording an event with a record outstanding undefined).
        self._spare = False
        self._reached = False

    @property
    def recorded(self) -> bool:
        """True once the event was recorded into a stream."""
        return self._recorded

    def __repr__(self) -> str:
        if self._closed:  # its driver handle is given up as the driver destroys it
            return f"<{self.backend} event closed>"
        state = "recorded" if self._recorded else "new"
        return f"<{self.backend} event {self._raw!r} {state}>"

    def __del__(self) -> None:
        # Safety net for an event dropped without event_destroy, or whose destroy an interrupt
        # left owed (see DriverBackend._collect); never raises. Every fence's event comes
        # here, released already (_users RELEASED, -1, a literal: at shutdown this module's
        # globals may be gone): that case returns first, reading one slot.
        try:
            if self._users == -1:
                return
            owner = self._owner
        except AttributeError:  # an __init__ that never ran, or was interrupted
            return
        if owner is not None and not type(owner)._is_finalizing():
            owner._collect(self)


@final
class Stream(_Handle, Generic[RS]):
    """A stream handle of a :class:`DriverBackend`. Users receive it; they never build one.

    ``owned`` is true for a stream the backend created, which :meth:`DriverBackend.stream_destroy`
    releases; an adopted stream (a framework's, or a raw handle) is never destroyed by eventapi.
    It cannot be copied or pickled (:class:`TypeError`).
    """

    __slots__ = ("_owned",)

    _raw: RS

    def __init__(self, raw: RS, owner: DriverBackend[Any, RS], *, owned: bool) -> None:
        # An adopted stream is open at once and never counted: nothing of it is eventapi's.
        super().__init__(raw, owner, opened=not owned)
        self._owned = owned

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

    @property
    def __cuda_stream__(self) -> Callable[[], tuple[int, int]]:
        """The ``__cuda_stream__`` protocol, on a backend whose streams speak it.

        ``stream.__cuda_stream__()`` gives ``(0, handle)``, the stream's address as an
        unsigned int, so cuda.core, CuPy, PyTorch or Numba adopt the stream as their own. The
        ``cuda`` and ``hip`` backends' streams have it (ROCm builds of the frameworks read HIP
        streams through the CUDA name); on any other backend the attribute is absent
        (``hasattr`` is False). The library that adopts the stream does not own it: the stream
        must outlive that library's use of it, as for every ``__cuda_stream__`` exporter, so
        destroy it only after the work launched on it through the other library is done.
        Calling it on a destroyed stream raises :class:`~eventapi.EventStateError`.
        """
        owner = self._owner
        if owner is None or owner._exported_handle(self._raw) is None:
            raise AttributeError(
                f"{self!r} has no __cuda_stream__: only cuda and hip streams can be handed to "
                "a framework through that protocol"
            )
        return self._export

    def _export(self) -> tuple[int, int]:
        owner = self._owner
        if self._closed or owner is None:
            raise EventStateError(
                f"{self!r}.__cuda_stream__() refused: the stream was destroyed, so its handle "
                "means nothing; hand the framework a live stream"
            )
        handle = owner._exported_handle(self._raw)
        assert handle is not None  # the property checked: a backend answers per class
        return (0, handle)

    def __repr__(self) -> str:
        kind = "stream" if self._owned else "adopted stream"
        if self._closed:  # its driver handle is given up as the driver destroys it
            return f"<{self.backend} {kind} closed>"
        return f"<{self.backend} {kind} {self._raw!r}>"

    def __del__(self) -> None:
        # Safety net for an owned stream dropped without stream_destroy; never raises.
        owner = getattr(self, "_owner", None)
        if owner is None or type(owner)._is_finalizing():
            return
        # getattr: an __init__ interrupted before these were set left nothing to release.
        # -1 is RELEASED, a literal for the reason Event.__del__ gives.
        if getattr(self, "_owned", False) and getattr(self, "_users", -1) != -1:
            owner._collect(self)


_RAW_SLOT: Final[Any] = vars(_Handle)["_raw"]


def raw_store(handle: _Handle) -> Callable[[Any], None]:
    """The callable that gives ``handle`` its driver handle: ``raw_store(h)(raw)`` sets it.

    A handle is created open and counted before the driver's create runs, and the create hands
    it the raw handle through this callable (``DriverBackend._raw_event_create_into``). It is
    the slot's own setter bound to the handle, so calling it runs no Python bytecode: called from
    C right after the driver returns, no signal handler can run between the create and the
    store.
    """
    return partial(_RAW_SLOT.__set__, handle)


def raw_take(handle: _Handle) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The pair that takes ``handle``'s driver handle out of it: ``read()`` and ``clear()``.

    ``read()`` gives the driver handle and ``clear()`` leaves :data:`NO_RAW` in its place. A
    destroy counts the handle gone before the driver's destroy runs, and hands this pair to the
    driver call (``DriverBackend._raw_event_destroy_from``), which reads, clears and destroys.
    Both are the slot's own getter and setter bound to the handle, so they run no Python
    bytecode: called from C, no signal handler runs between the three. An interrupt then finds
    the driver handle still in its wrapper, whose finalizer destroys it, or destroyed.
    """
    return partial(_RAW_SLOT.__get__, handle), partial(_RAW_SLOT.__set__, handle, NO_RAW)


def handle_slots() -> tuple[Any, ...]:
    """The slots a compiled fast path reads and writes, as their own descriptors.

    ``(owner, closed, raw, users, recorded, reached, spare)``: the first four of every handle,
    the last three of an event. A backend's C code (``eventapi_cuda._native``'s ``FastPath``)
    reads a handle's owner, state and driver handle through them and, after a record or a
    query, marks the event recorded or reached; a fence's event taken from the spares, or
    handed back to them, is opened or closed through them, as
    :class:`~eventapi.driverkit.DriverBackend`'s own methods do: the handle classes name what
    may be touched, and no other module spells their slots. They are every slot of an
    :class:`Event`, so C may build one without running ``__init__``: allocated by object's
    ``tp_new``, then given what ``Event(NO_RAW, owner)`` gives it (the owner; closed;
    ``NO_RAW``; no users; not recorded, reached or a spare). A compiled build of this module
    makes ``Event`` a native class, whose own ``tp_new`` must run: C calls that one.
    """
    handle, event = vars(_Handle), vars(Event)
    return (
        handle["_owner"],
        handle["_closed"],
        _RAW_SLOT,
        handle["_users"],
        event["_recorded"],
        event["_reached"],
        event["_spare"],
    )
