"""A Ctrl-C landing at a chosen point of a call: trace functions that raise KeyboardInterrupt.

CPython delivers a signal between bytecodes, so an interrupt can land as any call returns; a
test names the point (a function's return, or its entry) and runs the call under
:func:`interrupting`, which raises KeyboardInterrupt there, on the calling thread only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

Trace = Callable[[FrameType, str, Any], Any]


def on_return(where: Callable[[FrameType], bool]) -> Trace:
    """Raise KeyboardInterrupt as a frame for which ``where(frame)`` is true returns."""

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        return local if where(frame) else None

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "return":
            raise KeyboardInterrupt
        return local

    return trace


def on_return_of(code: CodeType) -> Trace:
    """Raise KeyboardInterrupt as ``code`` returns: a signal landing just after it."""
    return on_return(lambda frame: frame.f_code is code)


def on_call_of(code: CodeType) -> Trace:
    """Raise KeyboardInterrupt as ``code`` is entered: a signal landing just before it."""

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code is code:
            raise KeyboardInterrupt
        return None

    return trace


@contextmanager
def interrupting(trace: Trace) -> Iterator[None]:
    """Run the block with ``trace`` installed on this thread, removed afterwards."""
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(None)
