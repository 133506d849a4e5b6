"""Fixtures shared by the core tests: a fresh host backend that must end with nothing live.

The end of a run says each skip reason once, with its count, as the conformance kit does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eventapi.driverkit import Stream
from eventapi.host import HostBackend
from eventapi.testing.plugin import summarize_skips


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
