"""The ``eventapi`` command (also ``python -m eventapi``).

``eventapi backends [--json]`` prints the discovery table (with the install hints where
installing is the fix, and what ``eventapi.backend()`` would select, or the error it would
raise); ``eventapi check [NAME ...] [--json] [--trace FILE]`` exercises backends on this
machine (without a NAME, the one ``EVENTAPI_BACKEND`` names when it is set); ``eventapi trace
merge FILE ... -o OUT`` and ``eventapi trace report FILE -o OUT`` work on traces
(:mod:`eventapi.trace`), saying on stderr what a report leaves out; ``eventapi bench
module:function`` times a function (:func:`eventapi.bench`). Exit status: 0 on success, 1 when
a check fails or the default selection would fail, 2 for a usage error.

While ``eventapi backends`` and ``eventapi check`` run plugin or backend code (imports, hooks,
probes, loads, the checks themselves), what that code prints, through ``sys.stdout`` or
straight to file descriptor 1, goes to stderr: stdout carries the table, the report or the JSON
and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import TextIO

from .. import __version__
from .._errors import EventApiError
from .._plugins._discovery import KNOWN_HINTS, backends
from .._plugins._selection import ENV_BACKEND, passed_over, preview
from .._plugins._spec import BackendInfo
from ._bench import add_bench_parser
from ._report import report, table

__all__ = ["main"]

_COLUMNS = ("NAME", "PRIORITY", "DISTRIBUTION", "VERSION", "STATUS")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eventapi",
        description="Device events: list the installed backends and check them on this machine.",
    )
    parser.add_argument("--version", action="version", version=f"eventapi {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser(
        "backends",
        help="list installed backends and whether they can run here",
        description="List every backend discovery found, highest priority first, and the one "
        "eventapi.backend() selects by default.",
    )
    listing.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of objects with the keys name, distribution, version, "
        "priority, status, reason, install_hint",
    )
    listing.add_argument(
        "--retry",
        action="append",
        default=[],
        metavar="NAME",
        help="lift the quarantine of backend NAME (one whose plugin crashed the process while "
        "it was probed), so that it runs again in this listing; may be repeated",
    )
    listing.set_defaults(run=_backends)

    check = commands.add_parser(
        "check",
        help="run fences and profiler windows on backends and report what they measure",
        description="Fence waited from another thread, stream-to-stream dependency, profiler "
        "windows over a known delay, anchor uncertainty and per-call overheads, per backend. "
        "Exit status is non-zero when a check fails.",
    )
    check.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="backends to check, as NAME or NAME:DEVICE (default: the one EVENTAPI_BACKEND "
        "names when it is set, else every usable backend)",
    )
    check.add_argument("--json", action="store_true", help="print the results as JSON")
    check.add_argument("--trace", metavar="FILE", help="also write a trace of the run to FILE")
    check.set_defaults(run=run_check)

    trace = commands.add_parser(
        "trace",
        help="merge traces onto one time axis, or turn one into an HTML report",
        description="Work on Chrome Trace Event files written by eventapi.",
    )
    actions = trace.add_subparsers(dest="action", required=True, metavar="ACTION")
    merge = actions.add_parser(
        "merge",
        help="put traces of many processes and hosts on one time axis",
        description="Merge traces into one: processes of one host exactly, several hosts "
        "through their wall clocks.",
    )
    merge.add_argument("files", nargs="+", metavar="FILE", help="traces to merge, each once")
    merge.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="the merged trace (not an input)"
    )
    merge.add_argument(
        "--no-slice-args",
        dest="slice_args",
        action="store_false",
        help="drop each slice's args (duration_ns, depth, uncertainty_ns) so that speedscope "
        "aggregates slices by name",
    )
    page = actions.add_parser(
        "report",
        help="write a self-contained HTML page: timeline and per-name statistics",
        description="Write one HTML file that loads nothing from the network: a timeline "
        "per process and stream (zoom, pan, legend, tooltips), and count, total, min, "
        "median, p90, p99, max per name.",
    )
    page.add_argument("file", metavar="FILE", help="the trace to report on")
    page.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="the HTML file (default: FILE with .html in place of .json, beside it)",
    )
    add_bench_parser(commands)
    return parser


def _install_hints(rows: Sequence[BackendInfo]) -> str:
    """Install hints where installing is the fix, as a block of lines ("" when there are none).

    That is this project's backends that were not found, and plugins that could not be
    imported (a dependency of the plugin is missing). Not an unavailable backend: it is
    installed, and its status says what it lacks here (a driver, a device, a newer driver, or
    its binding) and what to do, a ``pip install`` of the extra that fits this driver
    included, which the row's hint could not know. Not a blocked one: the variable is the fix.
    """
    found = {row.name for row in rows}
    hints = [
        (row.name, row.install_hint)
        for row in rows
        if row.install_hint and row.reason.startswith("cannot import ")
    ]
    hints += [
        (name, f"{hint}  (not found)") for name, hint in KNOWN_HINTS.items() if name not in found
    ]
    if not hints:
        return ""
    return "install hints:\n" + textwrap.indent(table(hints), "  ") + "\n\n"


def _public_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _default_line(rows: Sequence[BackendInfo]) -> tuple[str, bool]:
    """The line saying what ``eventapi.backend()`` would do, and whether it would succeed."""
    try:
        name, device, source = preview()
    except (EventApiError, ValueError) as exc:
        return f"default: none; eventapi.backend() would raise {_public_name(exc)}: {exc}", False
    selected = name if device is None else f"{name}:{device}"
    why = f"from {ENV_BACKEND}" if source == ENV_BACKEND else "the usable backend of top priority"
    line = f"default: {selected} ({why})"
    if source != ENV_BACKEND:
        over = [row.name for row in passed_over(rows, name)]
        if over:
            line += f"; eventapi.backend() warns that it passes over broken {', '.join(over)}"
    return line, True


@contextlib.contextmanager
def _stdout_kept_for_us() -> Iterator[TextIO]:
    """Yield a stream on the real stdout; meanwhile ``sys.stdout`` and fd 1 go to stderr.

    Plugin code runs while the block does: whatever it prints, from Python or from C, lands on
    stderr, and only what is written to the yielded stream reaches stdout.
    """
    real = sys.stdout
    try:
        fd = real.fileno()
    except (AttributeError, ValueError):  # io.UnsupportedOperation is a ValueError
        fd = -1
    with contextlib.redirect_stdout(sys.stderr):
        if fd < 0:  # not a file (a test's capture): redirect what Python writes, nothing else
            yield real
            return
        real.flush()
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
        try:
            with open(saved, "w", encoding=real.encoding, errors=real.errors, closefd=False) as out:
                yield out
        finally:
            os.dup2(saved, fd)
            os.close(saved)


def _backends(args: argparse.Namespace, out: TextIO) -> int:
    from .._plugins import _quarantine

    for name in args.retry:  # lift the quarantine, saying on stderr what was removed
        removed = _quarantine.lift(name)
        said = f"runs again; removed {', '.join(removed)}" if removed else "was not quarantined"
        print(f"eventapi: {name} {said}", file=sys.stderr)
    rows = backends()
    default, would_work = _default_line(rows)
    if args.json:
        out.write(json.dumps([dataclasses.asdict(row) for row in rows], indent=2) + "\n")
        if not would_work:
            print(default, file=sys.stderr)
    else:
        cells = [(r.name, str(r.priority), r.distribution, r.version, r.status) for r in rows]
        out.write(table([_COLUMNS, *cells]) + "\n\n" + _install_hints(rows) + default + "\n")
    return 0 if would_work else 1


def run_check(args: argparse.Namespace, out: TextIO) -> int:
    """``eventapi check [NAME ...] [--json] [--trace FILE]``; returns the exit status.

    No NAME checks the backend ``EVENTAPI_BACKEND`` names when it is set, as
    ``eventapi.backend()`` selects it, else every usable backend discovery lists. A backend
    named (either way) that cannot be selected is a failed ``load`` row carrying the error
    ``eventapi.backend()`` raises, named as ``eventapi`` exports it: an explicit choice never
    falls back to checking another backend. Exit status 1 when any check failed (or nothing
    could be checked), else 0. The checks are :mod:`._check`'s, the table and the trace
    :mod:`._report`'s.
    """
    # Imported here: the checks pull in the fence and profiler machinery that listing does not.
    from .. import backend
    from ._check import FAIL, BackendReport, CheckResult, check_backend

    reports: list[BackendReport] = []
    variable = os.environ.get(ENV_BACKEND, "").strip()
    # No names: None when the variable is set (eventapi.backend() reads it, and raises what it
    # raises), else every usable backend.
    chosen: Sequence[str | None] = args.names or (
        [None] if variable else [info.name for info in backends() if info.usable]
    )
    for name in chosen:
        label = variable if name is None else name
        try:
            api = backend(name)
        except (EventApiError, ValueError) as exc:
            if name is not None and isinstance(exc, ValueError):
                raise  # a malformed NAME on the command line is a usage error
            failed = CheckResult(label, "load", FAIL, f"{_public_name(exc)}: {exc}", {})
            reports.append(BackendReport(label, (failed,)))
            continue
        reports.append(check_backend(api, name=label))
    return report(reports, as_json=args.json, trace=args.trace, out=out)


def _trace(args: argparse.Namespace) -> int:
    # Imported here: the trace machinery costs nothing to the other commands.
    from ..trace._merge import merge_files
    from ..trace._report import counted, write_report_file

    notes: tuple[str, ...] = ()
    try:
        if args.action == "merge":
            written = merge_files(args.files, args.output, slice_args=args.slice_args)
        else:
            written, notes = write_report_file(args.file, args.output)
    except (OSError, ValueError) as exc:
        # OSErrors raised by eventapi.trace name the file in their strerror already.
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.filename is not None:
            message = f"{exc.filename}: {message}"
        print(f"eventapi trace {args.action}: error: {message}", file=sys.stderr)
        return 1
    slices, tracks = counted(written.slices, "slice"), counted(written.tracks, "track")
    print(f"wrote {written.path}: {slices} on {tracks} of {counted(written.processes, 'process')}")
    for note in notes:  # what the page says it left out, said here too
        print(f"eventapi trace {args.action}: {note}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "trace":
            return _trace(args)
        with _stdout_kept_for_us() as out:  # the other commands run plugin or user code
            status: int = args.run(args, out)
    except (EventApiError, ValueError) as exc:
        # A ValueError is a usage error: a malformed NAME[:DEVICE] (or EVENTAPI_BACKEND), a
        # bench target that cannot be imported.
        print(f"eventapi: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, EventApiError) else 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `eventapi backends | head`: the reader left; that is not a failure of ours.
        sys.stderr.close()
        return 0
    return status
