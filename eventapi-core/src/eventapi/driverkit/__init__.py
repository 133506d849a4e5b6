"""Building blocks for a backend that spells a C driver API.

A backend only has to satisfy :class:`eventapi.EventApi`. Most backends wrap a C driver whose
handles are plain pointers, where a destroyed, foreign or never-recorded handle is undefined
behaviour rather than an error. :class:`DriverBackend` implements the protocol once over a
handful of ``_raw_*`` methods that spell the driver's calls, and adds what keeps such a driver
safe to call from Python:

* every handle is wrapped in an :class:`Event` or :class:`Stream` that remembers its backend
  object, whether it was closed and whether it was recorded, and a bad one is refused with
  :class:`~eventapi.EventStateError` before the driver sees it;
* a handle destroyed while another thread is inside a call with it (a fence closed while a
  waiter blocks on it) is destroyed when that call returns, never under it;
* a handle cannot be copied or pickled into a second owner;
* a stream the backend did not create (a framework's stream, a raw handle) is adopted without
  ownership and never destroyed;
* each thread is prepared once before its first driver call (:meth:`DriverBackend._bind_thread`,
  where a driver makes its context or device current);
* after ``fork()``, the objects and handles of the parent are refused in the child, and their
  finalizers there never call the driver;
* live handles are counted, so tests can prove nothing leaks;
* negative elapsed readings are clamped to zero.

The optional capabilities are opt-in, one class each: a backend whose driver has the call adds
:class:`EventQueryMixin`, :class:`CaptureCheckMixin` or :class:`HostFuncMixin` to its bases and
spells that class's one ``_raw_*`` method. A backend without one does not have the method at
all, so ``isinstance(backend, eventapi.SupportsHostFunc)`` stays truthful. Every
:class:`DriverBackend` has :class:`eventapi.SupportsFastPath` (``adopt_stream``,
``event_record_new``, ``event_record_unless_capturing``, ``event_elapsed_many``), spelled over
the same raw calls: a window costs one raw call to open, a collect one batch of readings.

The ``_raw_*`` contract (what a subclass spells):

* Call ``super().__init__()`` first in ``__init__``: it sets up the lock, the per-thread state
  and the counters every call uses.
* A raw handle may be any Python object except ``None``: a pointer as an ``int``, the
  binding's own handle object, an object of yours. The base never looks inside it; it is passed
  back to the ``_raw_*`` methods of the same object, and :attr:`Stream.raw` shows a stream's to
  the user (for the framework that launches work on it).
* Each raw call does exactly one thing and raises :class:`~eventapi.DriverError` (chained from
  the native error) when the driver fails. It is only ever given handles this object created
  (or adopted, for streams), never a closed one, and never one being destroyed meanwhile.
* A raw wait (``_raw_event_wait``, ``_raw_stream_synchronize``) releases the GIL while it
  blocks; nothing else may block.
* A raw destroy releases the handle and returns at once where the driver allows: a stream
  destroy should not wait for the work still queued on the stream (the driver finishes it, then
  frees the stream), since it runs from finalizers and ``close()``; where the driver's destroy
  waits (ROCm's may), it releases the GIL while it does. A raw destroy that fails must still
  leave nothing of the handle running: the base counts the handle gone either way and never
  passes it again.
* A create's handle is stored in its wrapper as the raw create returns, and a destroy takes
  it out right before the raw destroy: a Ctrl-C landing between the driver and the wrapper
  there loses that one driver handle (the counts stay exact). A backend for which that matters
  writes its handle types in compiled code, where the driver creates straight into the
  wrapper, as ``eventapi_cuda`` does.
* ``_raw_event_elapsed_ns`` returns the driver's reading unclamped; the base clamps.
  ``_raw_event_elapsed_ns_many`` (optional) makes many readings in one call, for a profiler's
  collect; the default calls ``_raw_event_elapsed_ns`` for each, and a backend overrides it
  where its driver reads many in one call.
* With :class:`CaptureCheckMixin`, ``_raw_event_record_unless_capturing`` (optional) makes the
  capture check and, unless the stream captures, the record: a profiler's window opens and
  stops with it. The default calls the two raw methods; a backend overrides it where its driver
  can make both calls in one step.

What a subclass may call besides (its protected surface): :meth:`DriverBackend._hold_stream`
and :meth:`DriverBackend._hold_event`, context managers that resolve a handle (or adopt a
foreign stream), refuse a closed or foreign one, and hold it for the length of a call that is
not one of the protocol's (a backend's own test aids, say); and the hooks it may override,
:meth:`~DriverBackend._bind_thread`, :meth:`~DriverBackend._adopt_stream`,
:meth:`~DriverBackend._shares_handles_with`, :meth:`~DriverBackend._context_lost` and
:meth:`~DriverBackend._last_handle_gone`.

For a backend on a C driver binding whose calls return a tuple led by a status code, this
module also re-exports the pieces such a backend would otherwise write again (from
:mod:`eventapi.driverkit._calls`): :class:`DriverCalls` (status checks and error translation with
the driver's own names, sticky errors included), :func:`launch_host_func` (the host-function
trampoline), :func:`foreign_stream_handle` (framework streams and raw handles),
:func:`ms_to_ns`, and the probe helpers :func:`open_driver_library` and :func:`c_int_out`.

A probe (the ``BackendSpec.probe`` a plugin gives discovery) runs in every process that lists
backends, in that process, so it may not do what could cost or crash it for everyone: it does
not import the binding (that is ``load``'s job, and an import can take seconds and load native
code); it calls no native code that can crash (a segfault cannot be caught, and would end a
process that was only listing backends), so at most the driver's stable query entry points
through :mod:`ctypes` with declared types, in the driver's documented order; and it finishes
in bounded time (no waits, no network, no subprocess), since a probe stuck in native code holds
its thread until the process exits.

The ``host`` backend is built on :class:`DriverBackend`, and so is the OpenCL example; ``cuda``
and ``hip`` use :class:`DriverCalls`, :func:`launch_host_func` and
:func:`foreign_stream_handle`, and own their handles in compiled code that behaves as
:class:`DriverBackend` does. A third-party backend may use it or satisfy the protocol directly;
the conformance kit checks the behaviour, not the base class.
What may change in this module, and how a change is announced, is written in the project's
compatibility policy (``docs/compatibility.md``).
"""

from __future__ import annotations

# Each name is imported from the private module that has it the first time it is read (PEP
# 562), as in eventapi/__init__.py: a plugin module imports eventapi.driverkit.probe, which
# runs this file, and must not pay for the handle layer. mypy and ruff read TYPE_CHECKING as
# true and see the imports; it is deleted below, so it is not public.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._backend import CaptureCheckMixin, DriverBackend, EventQueryMixin, HostFuncMixin
    from ._calls import DriverCalls, foreign_stream_handle, launch_host_func, ms_to_ns
    from ._handles import Event, LiveHandles, Stream
    from .probe import c_int_out, open_driver_library
else:

    def __getattr__(name: str) -> object:
        if name in __all__:
            from importlib import import_module

            # Looked for in the module that imports least first: probe's helpers come without
            # the handle layer, and _backend has the handles' names besides its own.
            for where in ("probe", "_calls", "_backend"):
                module = import_module(f"{__name__}.{where}")
                if hasattr(module, name):
                    globals()[name] = value = getattr(module, name)
                    return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING

__all__ = [
    "CaptureCheckMixin",
    "DriverBackend",
    "DriverCalls",
    "Event",
    "EventQueryMixin",
    "HostFuncMixin",
    "LiveHandles",
    "Stream",
    "c_int_out",
    "foreign_stream_handle",
    "launch_host_func",
    "ms_to_ns",
    "open_driver_library",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
