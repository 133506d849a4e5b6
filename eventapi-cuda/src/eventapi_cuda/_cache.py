"""Cold caches for a cuda or hip backend object: ``eventapi.SupportsCacheFlush``.

``eventapi_cuda._cache`` and ``eventapi_hip._cache`` are this one file, as ``_graphs.py`` is: the
backends differ only in the binding that spells the calls, which each gives as a
:class:`CacheCalls`. A flush is a memset of a scratch buffer as large as the device's L2 cache
(the size the device reports as an attribute), enqueued on a stream between two timed calls, as
nvbench does; Triton's ``do_bench`` writes a fixed 256 MB. The calls are made through the
binding, in Python: a flush runs outside every timed window, so a microsecond of binding there
moves no reading.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, final

from eventapi import EventStateError

from ._owned import Owned

__all__ = ["CacheCalls", "CacheFlush", "FlushBuffer"]

_log = logging.getLogger("eventapi")


class CacheCalls(NamedTuple):
    """A binding's memory calls; each raises :class:`~eventapi.DriverError` when it fails."""

    size: Callable[[int], int]
    """``(device ordinal)``: the device's L2 cache size in bytes."""
    alloc: Callable[[int], Any]
    """``(bytes)``: device memory (made in :attr:`on_device`)."""
    free: Callable[[Any], None]
    memset: Callable[[Any, int, int], None]
    """``(pointer, bytes, raw stream)``: enqueue a write of zeros (made in :attr:`on_device`)."""
    on_device: Callable[[Any], AbstractContextManager[object]]
    """``(backend object)``: its device current on the calling thread for the block."""
    unusable: Callable[[], bool]
    """True where the driver must not be called (a forked child, a lost device)."""


@final
class FlushBuffer(Owned):
    """A scratch buffer of the device's L2 size: what ``cache_flush_create`` returns.

    Users receive it; they never build one. It holds its backend object until destroyed, and
    ``copy``, ``deepcopy`` and ``pickle`` raise :class:`TypeError`: it has exactly one owner.
    """

    _DESTROY = "cache_flush_destroy"
    __slots__ = ("_backend", "_lock", "_pointer", "nbytes")

    def __init__(self, backend: CacheFlush, pointer: Any, nbytes: int) -> None:
        self._backend = backend
        self._pointer = pointer  # None once destroyed
        self._lock = threading.Lock()  # a flush and a destroy never overlap
        self.nbytes = nbytes

    @property
    def closed(self) -> bool:
        """True once the buffer was destroyed."""
        return self._pointer is None

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<{self._backend.BACKEND} cache flush buffer of {self.nbytes} bytes{state}>"

    def _destroy(self) -> None:
        self._backend.cache_flush_destroy(self)


class CacheFlush:
    """``cache_size_bytes``, ``cache_flush_create``, ``stream_flush_cache``,
    ``cache_flush_destroy``.

    Mixed into the backend class before ``_native.Backend``, which gives ``device`` and
    ``adopt_stream``; the class sets :attr:`_CACHE_CALLS`.
    """

    __slots__ = ()

    BACKEND: ClassVar[str]
    _CACHE_CALLS: ClassVar[CacheCalls]

    if TYPE_CHECKING:

        @property
        def device(self) -> int: ...  # _native.Backend's

        def adopt_stream(self, stream: object, /) -> Any: ...  # _native.Backend's

    def cache_size_bytes(self) -> int:
        """The device's L2 cache size in bytes (its attribute). See
        ``eventapi.SupportsCacheFlush``."""
        return self._CACHE_CALLS.size(self.device)

    def cache_flush_create(self) -> FlushBuffer:
        """A scratch buffer of :meth:`cache_size_bytes` on this object's device."""
        calls = self._CACHE_CALLS
        nbytes = self.cache_size_bytes()
        with calls.on_device(self):
            return FlushBuffer(self, calls.alloc(nbytes), nbytes)

    def stream_flush_cache(self, stream: object, buffer: FlushBuffer | object) -> None:
        """Enqueue a write of zeros over the whole of ``buffer`` on ``stream``."""
        own = self._own_buffer(buffer, "stream_flush_cache")
        try:
            raw: int = self.adopt_stream(stream).raw
        except EventStateError as exc:
            raise EventStateError(f"stream_flush_cache: {exc}") from exc
        calls = self._CACHE_CALLS
        with own._lock:
            if own._pointer is None:
                raise EventStateError(
                    f"{self.BACKEND}: stream_flush_cache refused {own!r}: it was already "
                    "destroyed; create another with cache_flush_create()"
                )
            with calls.on_device(self):
                calls.memset(own._pointer, own.nbytes, raw)

    def cache_flush_destroy(self, buffer: FlushBuffer | object) -> None:
        """Free ``buffer``; a second call is a no-op. A free the driver refuses still leaves
        the buffer closed, and raises its :class:`~eventapi.DriverError`."""
        own = self._own_buffer(buffer, "cache_flush_destroy")
        with own._lock:
            pointer, own._pointer = own._pointer, None
        calls = self._CACHE_CALLS
        if pointer is not None and not calls.unusable():
            with calls.on_device(self):
                calls.free(pointer)

    def _own_buffer(self, buffer: object, call: str) -> FlushBuffer:
        if type(buffer) is not FlushBuffer or buffer._backend is not self:
            raise EventStateError(
                f"{self.BACKEND}: {call} refused a {type(buffer).__qualname__}: not a buffer of "
                "this backend object; pass one its cache_flush_create() returned"
            )
        return buffer
