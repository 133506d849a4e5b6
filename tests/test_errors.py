"""The exception classes: where they say they live, and that they survive pickling."""

from __future__ import annotations

import pickle
import traceback

import pytest

import eventapi
from eventapi import DriverError, EventApiError

# Every public error class but DriverError, whose constructor takes the driver's fields: read
# off eventapi.__all__, which tests/test_public_api.py pins to the designed names, so an error
# added to the tree is covered here without a second list to keep.
ERRORS: tuple[type[EventApiError], ...] = tuple(
    cls
    for cls in (getattr(eventapi, name) for name in eventapi.__all__)
    if isinstance(cls, type) and issubclass(cls, EventApiError) and cls is not DriverError
)


@pytest.mark.parametrize("cls", [*ERRORS, DriverError], ids=lambda cls: cls.__name__)
def test_an_error_names_the_public_module_in_a_traceback(cls: type[EventApiError]) -> None:
    assert getattr(eventapi, cls.__name__) is cls
    error = (
        DriverError("cuda", "cuInit", 100, "CUDA_ERROR_NO_DEVICE", "no device")
        if cls is DriverError
        else cls("why")
    )
    printed = "".join(traceback.format_exception_only(error))
    assert printed.startswith(f"eventapi.{cls.__name__}: ")


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_an_error_pickles_to_the_same_class_and_message(cls: type[EventApiError]) -> None:
    copy = pickle.loads(pickle.dumps(cls("what to do next")))
    assert type(copy) is cls
    assert str(copy) == "what to do next"


def test_a_driver_error_pickles_with_every_field() -> None:
    error = DriverError(
        "hip", "hipEventQuery", 600, "hipErrorNotReady", "not ready", not_ready=True
    )
    copy = pickle.loads(pickle.dumps(error))
    fields = ("backend", "call", "code", "name", "message", "not_ready")
    assert [getattr(copy, f) for f in fields] == [getattr(error, f) for f in fields]
    assert str(copy) == str(error)
