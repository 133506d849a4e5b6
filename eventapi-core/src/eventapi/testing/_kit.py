"""The conformance kit's harness: loading the backend under test, tracking its handles, holding
its streams, and bounding every call that could block.

Every blocking call the kit makes runs on a helper thread that the test joins with a timeout, so
a backend that hangs fails the test with a message instead of hanging the run. A stream is held
by a host function that blocks on a :class:`threading.Event` (the ``SupportsHostFunc``
capability), never by a sleep: the kit knows exactly when the stream may move on.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, TypeVar, final

import pytest

from .._errors import EventStateError
from .._protocol import (
    PROTOCOL_METHODS,
    SupportsCacheFlush,
    SupportsCaptureCheck,
    SupportsClocks,
    SupportsEventQuery,
    SupportsFastPath,
    SupportsGraphRecord,
    SupportsGraphs,
    SupportsHostFunc,
    capabilities_of,
)

__all__ = [
    "BLOCK_WINDOW_S",
    "Hold",
    "Kit",
    "NotABackendError",
    "Waiter",
    "failed_destroy",
    "live_counts",
    "load_backend",
    "second_destroy",
]

T = TypeVar("T")

BLOCK_WINDOW_S: Final = 0.05
"""How long the kit watches a call that must block before it concludes that it does.

An observation window, not synchronization: a correct backend passes whatever its length, since
the call cannot return before the kit releases the hold; the window only bounds how long a wrong
backend gets to show that it returns early.
"""

_OBJECT_REF: Final = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

CAPABILITIES: Final[dict[str, type]] = {
    "SupportsEventQuery": SupportsEventQuery,
    "SupportsCaptureCheck": SupportsCaptureCheck,
    "SupportsHostFunc": SupportsHostFunc,
    "SupportsFastPath": SupportsFastPath,
    "SupportsGraphs": SupportsGraphs,
    "SupportsGraphRecord": SupportsGraphRecord,
    "SupportsCacheFlush": SupportsCacheFlush,
    "SupportsClocks": SupportsClocks,
}
"""The optional capabilities by name, in the order of :class:`eventapi._protocol.Capabilities`."""


def is_object_ref(spec: str) -> bool:
    """True for ``module:attr`` (``mypkg.mod:make_backend``), false for ``NAME[:DEVICE]``."""
    return _OBJECT_REF.match(spec) is not None


class NotABackendError(TypeError):
    """``--eventapi-backend`` named something that is not a backend object (or factory of one)."""


def load_backend(spec: str) -> tuple[Any, Callable[[], Any] | None]:
    """Return the backend object ``spec`` selects and, when there is one, a factory of more.

    ``spec`` is a discovery name, optionally with a device (``host``, ``cuda:1``), passed to
    :func:`eventapi.backend`; or ``module:attr``, a dotted attribute of an importable module
    that is either a backend object or a zero-argument factory (a class or function) returning
    one. Only a factory can make the second, independent backend object the foreign-handle
    checks need.

    Raises :class:`NotABackendError` when what ``module:attr`` names (or its factory returns)
    lacks ``BACKEND`` or a protocol method: the whole kit would fail on it, one test at a time.
    """
    if not is_object_ref(spec):
        import eventapi

        return eventapi.backend(spec), None
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    factory: Callable[[], Any] | None = None
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "event_create")):
        factory = obj
        obj = obj()
    missing = [
        name
        for name in ("BACKEND", *PROTOCOL_METHODS)
        if not hasattr(obj, name) or (name != "BACKEND" and not callable(getattr(obj, name)))
    ]
    if missing:
        made = f" returned {type(obj).__name__} object, which" if factory is not None else ""
        raise NotABackendError(
            f"{attr_path}{made} is not an eventapi backend: it lacks {', '.join(missing)}; "
            "name a backend object, or a class or function that returns one"
        )
    return obj, factory


def live_counts(api: object) -> tuple[int, int] | None:
    """``(events, streams)`` from the backend's ``live_handles()``, or None if it has none."""
    method = getattr(api, "live_handles", None)
    if not callable(method):
        return None
    counts = method()
    try:
        events, streams = counts
    except (TypeError, ValueError):
        pytest.fail(
            f"live_handles() returned {counts!r}; it must return a pair (events, streams)",
            pytrace=False,
        )
    if type(events) is not int or type(streams) is not int:
        pytest.fail(f"live_handles() returned {counts!r}; both counts must be int", pytrace=False)
    return events, streams


def second_destroy(kit: Kit, destroy: Callable[[Any], object], handle: Any) -> None:
    """Destroy ``handle`` again: a no-op, which returns and raises nothing.

    The contract (a second destroy is a no-op) lets every owner's close path be idempotent
    without guarding it; it must not reach the driver either, where a double free is undefined
    behaviour, which the live counts show.
    """
    try:
        kit.call(destroy, handle)
    except Exception as exc:
        pytest.fail(
            f"a second {getattr(destroy, '__name__', destroy)} raised {exc!r}; a second destroy "
            "of the same handle must be a no-op that raises nothing",
            pytrace=False,
        )


def failed_destroy(kit: Kit, destroy: Callable[[Any], object], handle: Any) -> None:
    """Destroy ``handle`` with a fault injected into the destroy; check what the contract says.

    Needs the backend's ``inject_fault(method)`` (the host backend's fault injection, which a
    backend may offer on the same terms); skips without it. A failed destroy may raise
    ``DriverError`` or nothing (owners only log it), and leaves the handle closed (refused from
    then on, a further destroy a no-op) and uncounted.
    """
    from .._errors import DriverError

    inject = getattr(kit.api, "inject_fault", None)
    if not callable(inject):
        pytest.skip(
            f"the {kit.api.BACKEND} backend has no inject_fault(method), so a failed destroy "
            "cannot be provoked"
        )
    name = getattr(destroy, "__name__", str(destroy))
    before = live_counts(kit.api)
    inject(name)
    with contextlib.suppress(DriverError):  # the owner logs it; the handle is released anyway
        kit.call(destroy, handle)
    after = live_counts(kit.api)
    if before is not None and after is not None:
        kind = 0 if name == "event_destroy" else 1
        assert after[kind] == before[kind] - 1, (
            f"a failed {name} left the live counts at {after} (from {before}): the handle must "
            "be closed and uncounted whatever the driver said"
        )
    second_destroy(kit, destroy, handle)
    assert live_counts(kit.api) == after, f"a destroy after a failed {name} released it again"


@final
class Hold:
    """A host function that keeps a stream from moving past it until :meth:`release`.

    ``started`` is set once the stream reached the host function. The function gives up by
    itself after ``limit`` seconds so that a test that forgets to release cannot wedge a driver
    thread forever; the test fails on its own timeouts long before.
    """

    __slots__ = ("_gate", "finished", "started")

    def __init__(self) -> None:
        self._gate = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()

    @property
    def released(self) -> bool:
        """True once :meth:`release` was called."""
        return self._gate.is_set()

    def release(self) -> None:
        """Let the stream move on. Idempotent."""
        self._gate.set()

    def host_func(self, limit: float) -> Callable[[], None]:
        def hold() -> None:
            self.started.set()
            self._gate.wait(limit)
            self.finished.set()

        return hold


@final
class Waiter:
    """A thread running one blocking call, watched by the test.

    It notes, at the moment the call returns, whether every hold it depends on had been
    released: a call that returns while a hold is still in place returned too early, however
    the threads were scheduled.
    """

    __slots__ = ("_error", "_holds", "_returned_early", "_thread", "_timeout", "what")

    def __init__(
        self, what: str, fn: Callable[[], object], holds: Iterable[Hold], timeout: float
    ) -> None:
        self.what = what
        self._holds = tuple(holds)
        self._timeout = timeout
        self._error: BaseException | None = None
        self._returned_early = False
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name=what)
        self._thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test thread by join()
            self._error = exc
            # A refusal raised at once is judged by join(), against what the test allows;
            # only a call that *completed* while a hold was in place returned too early.
            return
        self._returned_early = not all(hold.released for hold in self._holds)

    @property
    def blocked(self) -> bool:
        """True while the call has not returned."""
        return self._thread.is_alive()

    def watch(self, seconds: float) -> None:
        """Give the call ``seconds`` to return (it should not); see :data:`BLOCK_WINDOW_S`."""
        self._thread.join(seconds)

    def assert_blocked(self) -> None:
        """Fail unless the call is still blocked after :data:`BLOCK_WINDOW_S`."""
        self.watch(BLOCK_WINDOW_S)
        if not self.blocked:
            pytest.fail(
                f"{self.what} returned while the stream it depends on was still held "
                f"(raised {self._error!r})"
                if self._error is not None
                else f"{self.what} returned while the stream it depends on was still held",
                pytrace=False,
            )

    def join(self, *, allow: tuple[type[BaseException], ...] = ()) -> BaseException | None:
        """Wait for the call to return; re-raise what it raised unless it is of type ``allow``.

        Fails the test when the call does not return within the kit's timeout, or when it
        returned before its holds were released. Returns the allowed exception, if any.
        """
        self._thread.join(self._timeout)
        if self._thread.is_alive():
            pytest.fail(
                f"{self.what} did not return within {self._timeout:g} s after everything it "
                "depends on was released: a hang",
                pytrace=False,
            )
        if self._returned_early:
            pytest.fail(f"{self.what} returned before its stream was released", pytrace=False)
        error = self._error
        if error is not None:
            if isinstance(error, allow):
                return error
            raise error
        return None


@final
class Kit:
    """One test's view of the backend under test: its handles, holds and bounded calls.

    Handles made through the kit are destroyed when the test ends, whatever it did with them;
    destroying one the test destroyed already must be a no-op (the protocol's rule for a second
    destroy), and anything a destroy raises is reported.
    """

    __slots__ = ("_events", "_graphs", "_holds", "_streams", "_waiters", "api", "timeout")

    def __init__(self, api: Any, *, timeout: float) -> None:
        self.api: Any = api
        self.timeout = timeout
        self._events: list[tuple[Any, Any]] = []
        self._streams: list[tuple[Any, Any]] = []
        self._holds: list[Hold] = []
        self._waiters: list[Waiter] = []
        self._graphs: list[Any] = []

    # -- capabilities -------------------------------------------------------------------------

    def has(self, capability: str) -> bool:
        """True when the backend declares ``capability`` (``"SupportsEventQuery"``, say).

        Decided as the fence and the profiler decide it (``isinstance`` against the protocol,
        once per backend class), so the kit tests what the core will use.
        """
        index = list(CAPABILITIES).index(capability)
        return capabilities_of(self.api, "the conformance kit")[index]

    def require(self, capability: str) -> None:
        """Skip the test, naming ``capability``, unless the backend declares it."""
        if not self.has(capability):
            pytest.skip(f"the {self.api.BACKEND} backend does not implement {capability}")

    def require_live_handles(self) -> tuple[int, int]:
        """The live counts now; skips the test when the backend cannot count them."""
        counts = live_counts(self.api)
        if counts is None:
            pytest.skip(
                f"the {self.api.BACKEND} backend has no live_handles(), so releases are not "
                "countable"
            )
        return counts

    # -- handles ------------------------------------------------------------------------------

    def event(self, api: Any = None) -> Any:
        """A new event of ``api`` (default: the backend under test), destroyed after the test."""
        owner = self.api if api is None else api
        event = owner.event_create()
        self._events.append((owner, event))
        return event

    def stream(self, api: Any = None) -> Any:
        """A new non-blocking stream of ``api``, destroyed after the test."""
        owner = self.api if api is None else api
        stream = owner.stream_create_non_blocking()
        self._streams.append((owner, stream))
        return stream

    def recorded(self, stream: Any) -> Any:
        """A new event recorded on ``stream`` (bounded: recording must not block)."""
        event = self.event()
        self.call(self.api.event_record, event, stream)
        return event

    def reached(self, stream: Any) -> Any:
        """A new event recorded on ``stream`` and waited for."""
        event = self.recorded(stream)
        self.call(self.api.event_wait, event)
        return event

    def hold(self, stream: Any) -> Hold:
        """Hold ``stream`` at this point until the returned hold is released.

        Skips the test when the backend lacks ``SupportsHostFunc``; released after the test.
        """
        self.require("SupportsHostFunc")
        hold = Hold()
        self._holds.append(hold)
        # Limit the host function itself to a few test timeouts: long after any test gave up.
        self.call(self.api.stream_launch_host_func, stream, hold.host_func(self.timeout * 3))
        return hold

    # -- bounded calls ------------------------------------------------------------------------

    def call(self, fn: Callable[..., T], *args: object, what: str | None = None) -> T:
        """``fn(*args)`` on a helper thread; fails the test if it does not return in time.

        Whatever ``fn`` raises is raised here, so ``pytest.raises`` works around it. The helper
        is a thread that never called the backend before, which is itself part of the contract:
        any thread may call any method.
        """
        name = what or getattr(fn, "__name__", repr(fn))
        result: list[T] = []
        error: list[BaseException] = []

        def run() -> None:
            try:
                result.append(fn(*args))
            except BaseException as exc:  # re-raised on the test's thread below
                error.append(exc)

        thread = threading.Thread(target=run, daemon=True, name=f"eventapi-kit {name}")
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            pytest.fail(
                f"{name} did not return within {self.timeout:g} s: a hang "
                "(raise the limit with --eventapi-timeout if the device is just slow)",
                pytrace=False,
            )
        if error:
            raise error[0]
        return result[0]

    def waiter(
        self, fn: Callable[..., object], *args: object, holds: Iterable[Hold] = ()
    ) -> Waiter:
        """Start ``fn(*args)`` on a thread that the test watches; see :class:`Waiter`."""
        name = getattr(fn, "__name__", repr(fn))
        waiter = Waiter(name, lambda: fn(*args), holds, self.timeout)
        self._waiters.append(waiter)
        return waiter

    @contextlib.contextmanager
    def capturing(self, stream: Any) -> Iterator[None]:
        """Run the block with ``stream`` capturing a graph, then discard the graph.

        With ``SupportsGraphs`` the capture is the backend's own (``stream_begin_capture``,
        ``stream_end_capture``, ``graph_destroy``); else a backend may offer the test aids
        ``begin_capture(stream)`` and ``end_capture(stream)`` (the host backend has both).
        Skips the test, saying so, when it has neither.
        """
        if self.has("SupportsGraphs"):
            self.call(self.api.stream_begin_capture, stream)
            try:
                yield
            finally:
                self.call(self.api.graph_destroy, self.call(self.api.stream_end_capture, stream))
            return
        begin = getattr(self.api, "begin_capture", None)
        end = getattr(self.api, "end_capture", None)
        if not (callable(begin) and callable(end)):
            pytest.skip(
                f"the {self.api.BACKEND} backend has neither SupportsGraphs nor a "
                "begin_capture(stream) to start a capture"
            )
        self.call(begin, stream)
        try:
            yield
        finally:
            self.call(end, stream)

    def end_graph(self, stream: Any) -> Any:
        """End the capture of ``stream`` (``SupportsGraphs``); its graph, destroyed after the
        test."""
        graph = self.call(self.api.stream_end_capture, stream)
        self._graphs.append(graph)
        return graph

    def assert_unreached(self, event: Any, hold: Hold) -> None:
        """Fail unless ``event``, recorded behind ``hold``, is not reached yet.

        With ``SupportsEventQuery`` the query must say so; without, a wait must stay blocked.
        The caller must release ``hold`` afterwards.
        """
        if self.has("SupportsEventQuery"):
            assert not self.call(self.api.event_query, event), (
                "event_query returned True for an event recorded behind work that is still held"
            )
        else:
            self.waiter(self.api.event_wait, event, holds=(hold,)).assert_blocked()

    # -- teardown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Release holds, join waiters, drain and destroy every handle; fail on any problem."""
        problems: list[str] = []
        for hold in self._holds:
            hold.release()
        for waiter in self._waiters:
            waiter.watch(self.timeout)
            if waiter.blocked:
                problems.append(f"{waiter.what} still blocked {self.timeout:g} s after release")
        for owner, stream in self._streams:
            # A stream the test destroyed already refuses the synchronize, as it must.
            self._quietly(problems, owner.stream_synchronize, stream, allow=(EventStateError,))
        for graph in self._graphs:  # a second destroy of one the test destroyed is a no-op
            self._quietly(problems, self.api.graph_destroy, graph)
        self._graphs.clear()
        for owner, event in self._events:
            self._quietly(problems, owner.event_destroy, event)
        for owner, stream in self._streams:
            self._quietly(problems, owner.stream_destroy, stream)
        self._events.clear()
        self._streams.clear()
        if problems:
            pytest.fail("cleaning up after the test:\n" + "\n".join(problems), pytrace=False)

    def _quietly(
        self,
        problems: list[str],
        fn: Callable[[Any], object],
        handle: Any,
        *,
        allow: tuple[type[Exception], ...] = (),
    ) -> None:
        # A destroy of a handle the test destroyed already is a no-op, so it raises nothing.
        try:
            self.call(fn, handle)
        except allow:
            pass
        except pytest.fail.Exception as exc:
            problems.append(str(exc))
        except Exception as exc:
            problems.append(f"{getattr(fn, '__name__', fn)}({handle!r}) raised {exc!r}")
