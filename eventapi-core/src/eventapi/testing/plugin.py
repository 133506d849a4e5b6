"""The pytest plugin of the conformance kit, registered as ``eventapi.testing`` (``pytest11``).

It adds ``--eventapi-backend``, ``--eventapi-timeout`` and ``--eventapi-fuzz-examples`` and
fixtures prefixed ``eventapi_``. Without ``--eventapi-backend`` it is inert: it loads no
backend, touches no test outside the kit, and the kit's own tests, if collected anyway, skip
naming the option. It imports nothing beyond pytest and ``eventapi`` (no hypothesis, no driver
binding): pytest loads it in every run of every project where eventapi-core is installed.

::

    python -m pytest --pyargs eventapi.testing --eventapi-backend=NAME

``NAME`` is a backend name for :func:`eventapi.backend`, optionally with a device
(``host``, ``cuda``, ``cuda:1``), or ``module:attr`` naming a backend object or a zero-argument
factory of one (``mypkg.backend:MyBackend``).

A backend lacking an optional capability skips the kit's checks of it, often a dozen tests for
one reason. With ``--eventapi-backend`` the end of the run says each reason once, with how many
tests it skipped (:func:`summarize_skips`), instead of one line per test as ``-rs`` prints.
"""

from __future__ import annotations

import fnmatch
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._kit import Kit

_KIT_DIR = Path(__file__).resolve().parent

# The factory behind the backend under test, when --eventapi-backend named one.
_FACTORY = pytest.StashKey[Callable[[], Any] | None]()

FUZZ_EXAMPLES = 25
"""Default sequences per state machine: enough to cover every rule, a second or so per run."""

_NO_BACKEND = (
    "the eventapi conformance kit runs only with --eventapi-backend=NAME "
    "(a backend name such as host or cuda:1, or module:attr of a backend object or factory)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eventapi", "eventapi conformance kit (eventapi.testing)")
    group.addoption(
        "--eventapi-backend",
        metavar="NAME",
        default=None,
        help="run the eventapi conformance kit on this backend: a name for eventapi.backend() "
        "(host, cuda, cuda:1) or module:attr of a backend object or factory",
    )
    group.addoption(
        "--eventapi-fuzz-examples",
        metavar="N",
        type=int,
        default=FUZZ_EXAMPLES,
        help="how many random call sequences each of the kit's state machines tries "
        f"(default: {FUZZ_EXAMPLES}; raise it for a longer search)",
    )
    group.addoption(
        "--eventapi-timeout",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="how long a backend call the kit expects to return may take before the test "
        "fails as a hang (default: 10)",
    )


def pytest_configure(config: pytest.Config) -> None:
    examples: int = config.getoption("eventapi_fuzz_examples")
    if examples < 1:
        raise pytest.UsageError(f"--eventapi-fuzz-examples must be at least 1, got {examples}")
    # The kit joins threads with this timeout, and bounds a held stream by three of them: NaN,
    # infinity or a value past what a thread's join takes would fail every test, or none.
    timeout: float = config.getoption("eventapi_timeout")
    longest = threading.TIMEOUT_MAX / 3
    if not (math.isfinite(timeout) and 0 < timeout <= longest):
        raise pytest.UsageError(
            f"--eventapi-timeout must be a number of seconds above 0 and at most {longest:.3g}, "
            f"got {timeout}"
        )


def pytest_report_header(config: pytest.Config) -> str | None:
    spec = config.getoption("eventapi_backend")
    return None if spec is None else f"eventapi conformance kit: --eventapi-backend={spec}"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    # The kit's modules are test_*.py. A project whose own configuration collects other names
    # (python_files) must still get the kit when it asks for it; this adds only what the
    # configured patterns would miss, so nothing is collected twice.
    if file_path.parent != _KIT_DIR or not fnmatch.fnmatch(file_path.name, "test_*.py"):
        return None
    patterns: list[str] = parent.config.getini("python_files")
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns):
        return None
    module: pytest.Module = pytest.Module.from_parent(parent, path=file_path)
    return module


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if terminalreporter.config.getoption("eventapi_backend") is not None:
        summarize_skips(terminalreporter)


def summarize_skips(reporter: pytest.TerminalReporter) -> None:
    """Write each reason tests were skipped (or expected to fail) for once, with its count.

    Most common first. The run's own test suite calls it too (from its ``conftest.py``), so
    both say what was skipped the same way.
    """
    for outcome in ("skipped", "xfailed"):
        reasons = Counter(_reason(report) for report in reporter.stats.get(outcome, ()))
        if not reasons:
            continue
        total = sum(reasons.values())
        kinds = "one reason" if len(reasons) == 1 else f"{len(reasons)} reasons"
        reporter.write_sep("-", f"{total} {outcome}, {kinds}")
        width = len(str(max(reasons.values())))
        for reason, count in reasons.most_common():
            reporter.write_line(f"{count:>{width}} x {reason}")


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """A skipped or xfailed test's reason, on one line."""
    if hasattr(report, "wasxfail"):
        reason = str(report.wasxfail)
    elif isinstance(report.longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        reason = report.longrepr[2].removeprefix("Skipped: ")
    else:
        reason = str(report.longrepr)
    return " ".join(reason.split()) or "(no reason given)"


@pytest.fixture(scope="session")
def eventapi_backend_name(request: pytest.FixtureRequest) -> str:
    """The ``--eventapi-backend`` value; skips the test when the option is absent."""
    spec: str | None = request.config.getoption("eventapi_backend")
    if spec is None:
        pytest.skip(_NO_BACKEND)
    return spec


@pytest.fixture(scope="session")
def eventapi_timeout(request: pytest.FixtureRequest) -> float:
    """Seconds a call the kit expects to return may take (``--eventapi-timeout``)."""
    timeout: float = request.config.getoption("eventapi_timeout")
    return timeout


@pytest.fixture(scope="session")
def eventapi_fuzz_examples(request: pytest.FixtureRequest) -> int:
    """Random call sequences per state machine (``--eventapi-fuzz-examples``)."""
    examples: int = request.config.getoption("eventapi_fuzz_examples")
    return examples


@pytest.fixture(scope="session")
def eventapi_api(request: pytest.FixtureRequest, eventapi_backend_name: str) -> Any:
    """The backend object under test, one for the whole session."""
    from ._kit import NotABackendError, load_backend

    try:
        api, factory = load_backend(eventapi_backend_name)
    except NotABackendError as exc:
        pytest.exit(
            f"--eventapi-backend={eventapi_backend_name}: {exc}",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    except Exception as exc:
        # Every test would fail the same way: stop the run with one message instead. An
        # explicit choice that cannot load is a usage error, never a silent skip.
        pytest.exit(
            f"--eventapi-backend={eventapi_backend_name}: could not load the backend: "
            f"{type(exc).__name__}: {exc}",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    request.config.stash[_FACTORY] = factory
    return api


@pytest.fixture(scope="session")
def eventapi_second_api(request: pytest.FixtureRequest, eventapi_api: Any) -> Any:
    """A second, independent backend object of the same kind, for foreign-handle checks.

    Only a factory (``--eventapi-backend=module:attr`` naming a class or function) can make
    one; discovery returns one object per device. Skips otherwise.
    """
    factory = request.config.stash.get(_FACTORY, None)
    if factory is None:
        pytest.skip(
            "a second backend object needs --eventapi-backend=module:attr naming a factory "
            "(a class or function); a name or an instance gives one object per device"
        )
    second = factory()
    if second is eventapi_api:
        pytest.skip("the factory returned the same backend object twice")
    return second


@pytest.fixture
def eventapi_leak_check(eventapi_api: Any) -> Iterator[None]:
    """Fail the test when the backend's live handle counts differ after it from before.

    Countable only when the backend has ``live_handles()`` returning ``(events, streams)``;
    otherwise this does nothing.
    """
    from ._kit import live_counts

    before = live_counts(eventapi_api)
    yield
    if before is None:
        return
    after = live_counts(eventapi_api)
    if after != before:
        pytest.fail(
            f"{eventapi_api.BACKEND}: live handles (events, streams) were {before} before the "
            f"test and {after} after it, though the test destroyed every handle it made: each "
            "event_destroy and stream_destroy must release exactly one",
            pytrace=False,
        )


@pytest.fixture
def eventapi_kit(
    eventapi_api: Any, eventapi_leak_check: None, eventapi_timeout: float
) -> Iterator[Kit]:
    """The test's :class:`~eventapi.testing.Kit`: handles, holds and bounded calls.

    Everything made through it is released and destroyed when the test ends, before the leak
    check compares the live counts.
    """
    from ._kit import Kit

    kit = Kit(eventapi_api, timeout=eventapi_timeout)
    try:
        yield kit
    finally:
        kit.close()


@pytest.fixture
def eventapi_stream(eventapi_kit: Kit) -> Any:
    """A fresh non-blocking stream of the backend under test, destroyed after the test."""
    return eventapi_kit.stream()
