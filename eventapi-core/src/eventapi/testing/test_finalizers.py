"""Destroy from where owners really call it: finalizers, and garbage collection on any thread."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from ._kit import Kit, live_counts

HOLDERS = 4


class _Owner:
    """Stands for a fence or profiler: something whose finalizer releases backend handles."""

    __slots__ = ("__weakref__", "cycle", "event", "stream")

    def __init__(self, event: Any, stream: Any) -> None:
        self.event = event
        self.stream = stream
        self.cycle: object = None


class _CycleOwner:
    """An owner in a reference cycle, so only the cycle collector frees it; its __del__
    destroys its handles as an owner's safety net does."""

    def __init__(self, api: Any, event: Any, stream: Any, errors: list[BaseException]) -> None:
        self.api = api
        self.event = event
        self.stream = stream
        self.errors = errors
        self.me = self

    def __del__(self) -> None:
        try:
            self.api.event_destroy(self.event)
            self.api.stream_destroy(self.stream)
        except BaseException as exc:  # a finalizer reports by recording
            self.errors.append(exc)


def _release(api: Any, event: Any, stream: Any, errors: list[BaseException]) -> None:
    try:
        api.event_destroy(event)
        api.stream_destroy(stream)
    except BaseException as exc:  # the test asserts the list is empty
        errors.append(exc)


def test_destroy_from_a_weakref_finalize_callback(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    before = live_counts(api)
    stream = api.stream_create_non_blocking()
    event = api.event_create()
    eventapi_kit.call(api.event_record, event, stream)
    eventapi_kit.call(api.event_wait, event)
    owner = _Owner(event, stream)
    errors: list[BaseException] = []
    finalizer = weakref.finalize(owner, _release, api, event, stream, errors)
    del owner  # the callback runs here, on this thread
    assert not finalizer.alive, "the owner was not freed"
    assert errors == [], f"destroy from a finalizer raised {errors!r}"
    assert live_counts(api) == before


def test_destroy_during_gc_on_another_thread(eventapi_kit: Kit) -> None:
    api = eventapi_kit.api
    before = live_counts(api)
    errors: list[BaseException] = []
    freed: list[int] = []
    was_enabled = gc.isenabled()
    gc.disable()  # the collection must happen on the helper thread below, not by chance here
    try:
        for index in range(HOLDERS):
            stream = api.stream_create_non_blocking()
            event = api.event_create()
            eventapi_kit.call(api.event_record, event, stream)
            if index % 2:
                eventapi_kit.call(api.event_wait, event)  # half reached, half maybe pending
            weakref.finalize(_CycleOwner(api, event, stream, errors), freed.append, index)
        del stream, event
        eventapi_kit.call(gc.collect, what="gc.collect on another thread")
    finally:
        if was_enabled:
            gc.enable()
    assert sorted(freed) == list(range(HOLDERS)), "the owners were not collected"
    assert errors == [], f"destroy during garbage collection raised {errors!r}"
    assert live_counts(api) == before
