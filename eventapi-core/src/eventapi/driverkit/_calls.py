"""What every backend on a C driver binding needs beyond spelling the driver's calls.

The CUDA and HIP bindings agree on a calling convention: a call returns a tuple led by the
driver's status code, a missing library or symbol surfaces as a ``RuntimeError`` at the first
call, a host function is a C pointer ``void (*)(void *user_data)``, and a framework's stream
arrives as an integer handle or as an object speaking the ``__cuda_stream__`` protocol. The
pieces here implement that convention once; :mod:`eventapi.driverkit` re-exports them.

* :class:`DriverCalls` runs a binding call, checks its status and translates a failure into
  :class:`~eventapi.DriverError` with the driver's own name and text for the code (cached),
  and remembers a sticky error (a lost device context) so later calls fail fast;
* :func:`launch_host_func` keeps a Python callable alive until a driver thread has run it
  through one shared C trampoline, and logs what it raises;
* :func:`foreign_stream_handle` reads the integer handle out of a stream the backend did not
  create.

What a plugin's probe asks the driver library (:func:`open_driver_library`, :func:`c_int_out`)
is in :mod:`eventapi.driverkit.probe`, which a probe imports without this module.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, SupportsIndex, SupportsInt, cast, final

from .._arguments import bounded_repr, check_real
from .._errors import DriverError, EventStateError
from .._gil import release_gil
from .._logger import logger
from .probe import wrong_type

__all__ = ["DriverCalls", "foreign_stream_handle", "launch_host_func", "ms_to_ns"]

SPIN_NS = 100_000
"""How long :meth:`DriverCalls.wait` queries before it blocks: a few dozen queries.

A wait that outlasts it burns these 100 us of CPU (0.2 % of a 50 ms wait) where a driver's own
spin would burn all of it; one shorter returns as fast as the driver's spin would.
"""

Describe = Callable[[Any], tuple[str | None, str | None]]
"""Looks up a status code's ``(name, text)`` in the driver; either may be None when unknown."""


@final
class DriverCalls:
    """Runs one binding's calls and translates their failures into :class:`~eventapi.DriverError`.

    ``describe`` asks the driver for a status code's name and text (``cuGetErrorName`` and
    ``cuGetErrorString``, say); each code is looked up once and cached. ``not_ready`` is the
    status that means "not reached yet" (it sets ``DriverError.not_ready`` and makes
    :meth:`ready` return False). ``missing`` is the status reported when the binding could not
    reach the library or a symbol in it, and ``missing_hint`` says what to do about that.
    ``sticky`` lists the codes after which the driver fails every later call with the same
    code until the process exits (a kernel's illegal address, say): the first such failure is
    raised with a message saying that the device context is lost and the process must
    restart, is kept in :attr:`lost`, and every later call raises a copy of it at once,
    naming its own call, without calling the driver (which could only fail the same way).
    Thread-safe: the cache only ever gains entries, and a racing lookup stores the same value.

    The codes (``not_ready``, ``missing``, each of ``sticky``) are the binding's status values
    or plain ``int`` s. Raises :class:`TypeError` for a code that is not an integer (a ``str``,
    a ``float``), for ``sticky`` given as one code or a string, and for a ``describe`` that is
    not callable.
    """

    __slots__ = (
        "_backend",
        "_describe",
        "_missing",
        "_missing_hint",
        "_names",
        "_not_ready",
        "_sticky",
        "lost",
    )

    lost: DriverError | None
    """The sticky error that lost the device context, or None while the driver is usable."""

    def __init__(
        self,
        backend: str,
        *,
        describe: Describe,
        not_ready: Any,
        missing: Any,
        missing_hint: str,
        sticky: Collection[Any] = (),
    ) -> None:
        if not callable(describe):
            raise wrong_type(
                "DriverCalls: describe", "a callable (status -> (name, text))", describe
            )
        if isinstance(sticky, str | bytes) or not isinstance(sticky, Collection):
            raise wrong_type("DriverCalls: sticky", "a collection of status codes", sticky)
        self._backend = backend
        self._describe = describe
        self._not_ready = _status_code(not_ready, "not_ready")
        _status_code(missing, "missing")
        self._missing = missing
        self._missing_hint = missing_hint
        self._names: dict[int, tuple[str, str]] = {}
        self._sticky = frozenset(_status_code(code, "each of sticky") for code in sticky)
        self.lost = None

    def __call__(self, fn: Callable[..., Any], *args: object) -> Any:
        """Call ``fn(*args)``; return what follows the status: None, one value, or a tuple.

        Raises :class:`~eventapi.DriverError` when the status is not success (0), or at once,
        without calling, once the device context was lost (:attr:`lost`).
        """
        status, *values = self._run(fn, *args)
        if status:
            raise self.error(_call_name(fn), status)
        if len(values) > 1:
            return tuple(values)
        return values[0] if values else None

    def ready(self, fn: Callable[..., Any], *args: object) -> bool:
        """Call a query: True on success, False on the not-ready status, else raise."""
        status = self._run(fn, *args)[0]
        if status and status != self._not_ready:
            raise self.error(_call_name(fn), status)
        return not status

    def _run(self, fn: Callable[..., Any], *args: object) -> Any:
        # What the binding returns for fn(*args): the status first. Not called once the
        # context is lost; a binding that cannot reach the driver raises RuntimeError.
        if self.lost is not None:
            raise self._lost_again(self.lost, fn)
        try:
            return fn(*args)
        except RuntimeError as exc:
            raise self.unreachable(fn, exc) from exc

    def wait(
        self, synchronize: Callable[..., Any], query: Callable[..., Any], handle: object
    ) -> None:
        """Wait for an event: query it for up to :data:`SPIN_NS`, then block in ``synchronize``.

        For an event created with the driver's blocking-sync flag, whose ``synchronize`` sleeps
        instead of spinning: a sleeping thread is woken some tens of microseconds after the
        device reached the event, which the short waits (an anchor's sample, a fence on work
        that is nearly done) would pay in full. They return from the spin instead; a longer
        wait costs at most the spin's CPU, then sleeps. The GIL is let go between queries.
        Raises :class:`~eventapi.DriverError` from either call.
        """
        deadline = time.perf_counter_ns() + SPIN_NS
        while not self.ready(query, handle):
            if time.perf_counter_ns() >= deadline:
                self(synchronize, handle)
                return
            release_gil()  # lets another thread run, keeps the core (see eventapi._gil)

    def error(self, call: str, status: Any) -> DriverError:
        """The :class:`~eventapi.DriverError` for ``status`` returned by the driver call ``call``.

        A sticky code also marks the device context lost (:attr:`lost`).
        """
        code = int(status)
        name, text = self._names.get(code) or self._lookup(code, status)
        if code in self._sticky:
            message = (
                f"{text}; the device context is lost (a sticky error: every later call fails "
                "with it), so restart the process to use the device again"
            )
            if self.lost is None:
                # Its own object, never raised: a raised one's traceback would keep the
                # frames of that call, and the handles in them, alive for the process.
                self.lost = DriverError(self._backend, call, code, name, message)
            return DriverError(self._backend, call, code, name, message)
        return DriverError(self._backend, call, code, name, text, not_ready=code == self._not_ready)

    def failure(self, call: str, status: int) -> DriverError:
        """The :class:`~eventapi.DriverError` for ``status``, which the driver call ``call``
        returned to compiled code that called the driver directly.

        As :meth:`error`, except once the device context was lost (:attr:`lost`): then the
        error says so, naming ``call``, as a call of this object would raise without calling.
        A backend whose compiled calls stop calling the driver once it is lost asks this for
        the error of each call it refused, passing the lost status.
        """
        if self.lost is not None:
            return self._lost_again(self.lost, call)
        return self.error(call, status)

    def _lost_again(self, lost: DriverError, fn: Callable[..., Any] | str) -> DriverError:
        return DriverError(
            self._backend,
            _call_name(fn),
            lost.code,
            lost.name,
            f"not called: the device context was lost earlier ({lost.call} failed with "
            f"{lost.name}); restart the process to use the device again",
        )

    def unreachable(self, fn: Callable[..., Any], exc: BaseException) -> DriverError:
        """The :class:`~eventapi.DriverError` for a call the binding could not make at all."""
        return DriverError(
            self._backend,
            _call_name(fn),
            int(self._missing),
            str(getattr(self._missing, "name", self._missing)),
            f"the binding could not reach the driver ({exc}); {self._missing_hint}",
        )

    def _lookup(self, code: int, status: Any) -> tuple[str, str]:
        try:
            name, text = self._describe(status)
        except Exception:  # the lookup is a courtesy; the code itself is the fact
            logger().debug("%s: no description for status %d", self._backend, code, exc_info=True)
            name = text = None
        self._names[code] = entry = (
            name or str(getattr(status, "name", f"error {code}")),
            text or "the driver gave no description for this code",
        )
        return entry


def _status_code(code: object, what: str) -> int:
    # The bindings' status enums are ints; int() would also take a str, a float or a Decimal.
    if isinstance(code, bool) or not isinstance(code, SupportsIndex):
        raise wrong_type(
            f"DriverCalls: {what}", "a status code (the binding's enum value or an int)", code
        )
    return operator.index(code)


def _call_name(fn: Callable[..., Any] | str) -> str:
    return str(getattr(fn, "__name__", fn))


def ms_to_ns(ms: float) -> int:
    """A driver's float milliseconds as integer nanoseconds, rounded to the nearest.

    Rounding, not truncation: the float is the driver's integer tick count divided into
    milliseconds, so a reading such as 1.5 us arrives as 0.0014999999 ms; truncating would bias
    every such reading one nanosecond low. Raises :class:`TypeError` for a value that is not
    a number (a ``str`` included), :class:`ValueError` for one that is not finite or whose
    nanoseconds are not.
    """
    unit = "milliseconds"
    ns = (ms if type(ms) is float else check_real(ms, "ms_to_ns: ms", unit=unit)) * 1_000_000
    if not math.isfinite(ns):
        raise ValueError(f"ms_to_ns: ms must be a finite number of {unit}, got {bounded_repr(ms)}")
    return round(ns)


# -- host functions -------------------------------------------------------------------------

_pending: dict[int, tuple[str, Callable[[], object]]] = {}
_pending_lock = threading.Lock()
_keys = itertools.count(1)  # 0 would be a NULL user-data pointer


def _run_host_func(user_data: int | None) -> None:
    # Runs on a driver thread; ctypes holds the GIL for us. Nothing may escape into C.
    with _pending_lock:
        backend, fn = _pending.pop(user_data or 0, (None, None))
    if fn is None:
        logger().error("host function trampoline called with unknown user data %r", user_data)
        return
    try:
        fn()
    except BaseException:  # a driver thread has nowhere to raise to
        logger().exception("%s: host function %r raised; the stream carries on", backend, fn)


@functools.cache
def _trampoline() -> tuple[object, int]:
    # The ctypes callback that runs _run_host_func, and its address: made on first use, so that
    # importing this module does not import ctypes, and kept alive by the cache for the process.
    # Called with _pending_lock held, so that two first launches cannot make two (the one the
    # cache did not keep would be freed under its driver thread).
    import ctypes

    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_run_host_func)
    return callback, int(ctypes.cast(callback, ctypes.c_void_p).value or 0)


def launch_host_func(
    backend: str, fn: Callable[[], object], enqueue: Callable[[int, int], None]
) -> None:
    """Enqueue ``fn`` through the shared C trampoline.

    ``enqueue(fn_address, user_data)`` spells the driver's launch call with the trampoline's
    address as the C function and ``user_data`` as its argument. ``fn`` is held until a driver
    thread has run it (or the launch failed); an exception it raises is logged on the
    ``eventapi`` logger, never propagated into the driver's thread. Launch only into a stream
    that is not capturing a graph (:class:`~eventapi.driverkit.HostFuncMixin` checks): a
    captured launch would run on the graph's first replay only, and be held forever when the
    graph is never launched. Raises :class:`TypeError`, before anything is enqueued, when
    ``fn`` or ``enqueue`` is not callable.
    """
    for what, value in (("fn", fn), ("enqueue", enqueue)):
        if not callable(value):
            raise wrong_type(f"launch_host_func: {what}", "callable", value)
    key = next(_keys)
    with _pending_lock:
        address = _trampoline()[1]
        _pending[key] = (backend, fn)
    try:
        enqueue(address, key)
    except BaseException:
        with _pending_lock:
            _pending.pop(key, None)
        raise


def pending_host_funcs() -> int:
    """Host functions launched and not run yet, across every backend in the process.

    For tests that prove no launched function is held forever; not part of the driverkit, nor
    of this module's ``__all__`` (what :mod:`eventapi.driverkit` takes from it).
    """
    with _pending_lock:
        return len(_pending)


def _forget_pending_in_child() -> None:
    # After fork(): the parent's launched functions will never run here (the driver threads
    # that would run them are the parent's), and a driver thread may have held the lock at the
    # fork; start over with a fresh lock and nothing pending.
    global _pending_lock
    _pending_lock = threading.Lock()
    _pending.clear()


os.register_at_fork(after_in_child=_forget_pending_in_child)


# -- foreign streams ------------------------------------------------------------------------

_UINT64 = (1 << 64) - 1


def foreign_stream_handle(
    backend: str,
    stream: object,
    *,
    protocols: Sequence[str] = ("__cuda_stream__",),
    native: tuple[type, ...] = (),
) -> int | None:
    """The integer handle of a stream another library created, or None if it is not one.

    Accepts a non-negative ``int`` (trusted: without the driver a raw handle cannot be
    validated), an instance of one of the binding's own ``native`` stream types, and any object
    with one of ``protocols``: a method (or, defensively, an attribute) giving ``(version,
    handle)`` with version 0, as cuda.core, CuPy and PyTorch streams do. The protocol's handle
    is read as the unsigned 64-bit pointer it is: an exporter that keeps it in a signed C
    integer (cuda.core does) gives a handle with the top bit set as a negative ``int``, which
    means the same pointer. An object whose protocol method raises is refused with
    :class:`~eventapi.EventStateError` naming the cause. Raises :class:`TypeError` when
    ``protocols`` is a single name (or not names) or ``native`` not a tuple of types.
    """
    if isinstance(protocols, str) or not all(isinstance(name, str) for name in protocols):
        what = "a sequence of attribute names (a tuple of str)"
        raise wrong_type("foreign_stream_handle: protocols", what, protocols)
    if not isinstance(native, tuple) or not all(isinstance(kind, type) for kind in native):
        raise wrong_type("foreign_stream_handle: native", "a tuple of types", native)
    if isinstance(stream, int):  # a raw handle; a bool is a flag passed by mistake, not one
        return stream if 0 <= stream < 1 << 64 and not isinstance(stream, bool) else None
    if isinstance(stream, native):
        return int(cast("SupportsInt", stream))
    for name in protocols:
        attr = getattr(stream, name, None)
        if attr is None:
            continue
        try:
            value = attr() if callable(attr) else attr
        except Exception as exc:
            raise EventStateError(
                f"{backend}: {name}() of {bounded_repr(stream)} raised {bounded_repr(exc)}; "
                "pass a live stream"
            ) from exc
        if (
            isinstance(value, tuple)
            and len(value) == 2
            and all(type(v) is int for v in value)
            and value[0] == 0
            and -(1 << 63) <= value[1] < 1 << 64
        ):
            return cast("int", value[1] & _UINT64)
        return None
    return None
