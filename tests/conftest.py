"""Fixtures shared by the core tests: a fresh host backend that must end with nothing live, and
the emulated CUDA driver, which must end with no more driver handles than it began with.

The end of a run says each skip reason once, with its count, as the conformance kit does.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from emulated_driver import EmulatedDriver, load

from eventapi.driverkit import Stream
from eventapi.host import HostBackend
from eventapi.testing.plugin import summarize_skips


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control starts a background job with SIGINT ignored, and an ignored
    # signal stays ignored in every process started from it: the tests that send a child SIGINT
    # (a Ctrl-C) would find it ignored and fail. A handler is reset to the default at exec, so
    # with one installed here every child starts with SIGINT as a terminal's Ctrl-C finds it.
    # (A Ctrl-C at the terminal then stops such a background run too, as it would a foreground one.)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # With --eventapi-backend the kit's own plugin already wrote it.
    if terminalreporter.config.getoption("eventapi_backend", None) is None:
        summarize_skips(terminalreporter)


@pytest.fixture
def host() -> Iterator[HostBackend]:
    """A fresh HostBackend; the test fails at teardown if it left an event or stream alive."""
    api = HostBackend()
    yield api
    assert api.live_handles() == (0, 0), "the test leaked host handles"


@pytest.fixture
def host_stream(host: HostBackend) -> Iterator[Stream[Any]]:
    """A stream of ``host``, destroyed after the test (before ``host`` counts what is live)."""
    stream = host.stream_create_non_blocking()
    yield stream
    if not stream.closed:
        host.stream_destroy(stream)


@pytest.fixture
def emu_cuda() -> Iterator[EmulatedDriver]:
    """The emulated CUDA driver, loaded; the test fails at teardown if it left a driver handle."""
    driver = load("cuda")
    before = driver.live_handles()
    yield driver
    after = driver.live_handles()
    assert (after.events, after.streams) == (before.events, before.streams), "driver leak"
