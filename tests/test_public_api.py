"""The public surface of ``eventapi``: exactly the names of the design, and the error tree."""

from __future__ import annotations

import pickle

import pytest

import eventapi
from eventapi import (
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    CaptureError,
    DriverError,
    EventApiError,
    EventStateError,
    UnsupportedError,
)

# The public names the design fixes; third-party backends and users depend on each.
PUBLIC = {
    "EventApi",
    "SupportsEventQuery",
    "SupportsCaptureCheck",
    "SupportsHostFunc",
    "EventFence",
    "EventProfiler",
    "Window",
    "Span",
    "Stats",
    "Anchor",
    "EventApiError",
    "DriverError",
    "EventStateError",
    "CaptureError",
    "UnsupportedError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "BackendSpec",
    "BackendInfo",
    "backend",
    "backends",
    "hookimpl",
    "hookspec",
    "PLUGIN_API",
    "bench",
}


def test_all_is_exactly_the_public_names_and_sorted() -> None:
    assert set(eventapi.__all__) == PUBLIC
    assert len(eventapi.__all__) == len(PUBLIC)
    # Sorted as isort sorts imports: constants, then classes, then functions.
    kind = {True: 0, False: 1}
    assert eventapi.__all__ == sorted(
        eventapi.__all__, key=lambda n: (kind[n.isupper()] if n[0].isupper() else 2, n)
    )
    for name in eventapi.__all__:
        assert getattr(eventapi, name) is not None


def test_nothing_else_public_by_accident() -> None:
    public = {
        name
        for name in vars(eventapi)
        if not name.startswith("_") and not isinstance(getattr(eventapi, name), type(eventapi))
    }
    assert public - {"annotations"} == PUBLIC


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (DriverError, (EventApiError,)),
        (EventStateError, (EventApiError, ValueError)),
        (CaptureError, (EventApiError,)),
        (UnsupportedError, (EventApiError, NotImplementedError)),
        (BackendError, (EventApiError,)),
        (BackendNotFoundError, (BackendError, LookupError)),
        (BackendUnavailableError, (BackendError,)),
    ],
)
def test_the_error_tree(error: type[Exception], bases: tuple[type[Exception], ...]) -> None:
    for base in bases:
        assert issubclass(error, base)


@pytest.mark.parametrize("name", sorted(n for n in PUBLIC if n.endswith("Error")))
def test_errors_print_under_their_public_name(name: str) -> None:
    error = getattr(eventapi, name)
    # What a traceback prints, and where pickle finds the class: never a private module.
    assert f"{error.__module__}.{error.__qualname__}" == f"eventapi.{name}"
    assert pickle.loads(pickle.dumps(error)) is error


def test_a_driver_error_reads_like_the_driver_and_survives_pickling() -> None:
    err = DriverError(
        "cuda", "cuEventRecord", 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"
    )
    assert str(err) == (
        "cuda: cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (400): invalid resource handle"
    )
    assert not err.not_ready

    ready = DriverError(
        "hip", "hipEventElapsedTime", 600, "hipErrorNotReady", "not ready", not_ready=True
    )
    copy = pickle.loads(pickle.dumps(ready))
    assert (copy.backend, copy.call, copy.code, copy.name, copy.message, copy.not_ready) == (
        "hip",
        "hipEventElapsedTime",
        600,
        "hipErrorNotReady",
        "not ready",
        True,
    )
    assert str(copy) == str(ready)


def test_plugin_api_is_a_major_minor_pair() -> None:
    major, minor = eventapi.PLUGIN_API
    assert isinstance(major, int)
    assert isinstance(minor, int)
    assert eventapi.BackendSpec("x", load=lambda device: None).api_version == eventapi.PLUGIN_API
