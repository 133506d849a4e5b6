"""``eventapi bench module:function``: :func:`eventapi.bench` from the command line.

The target is imported as ``python -m`` would find it (the current directory first on the
path) and called as ``fn(stream)``. ``--backend NAME`` selects the backend the way
``EVENTAPI_BACKEND`` does, and sets that variable for the run, so that an ``fn`` that calls
``eventapi.backend()`` itself gets the same backend object. One line per result, or
``--json``: the result's fields (readings in time order included) as one JSON object. The
result's warnings (a throttled device among them) go to stderr, one line each, in both forms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pkgutil
import sys
from collections.abc import Callable
from typing import Any, TextIO

from .._errors import EventApiError

__all__ = ["add_bench_parser"]


def add_bench_parser(commands: Any) -> None:
    """Add the ``bench`` command, which :func:`run_bench` runs, to the ``eventapi`` parser's
    subcommands."""
    bench = commands.add_parser(
        "bench",
        help="time a function on a stream: median, 95 %% interval, launch gaps",
        description="Call module:function(stream) repeatedly and time each call with device "
        "events (eventapi.bench). Prints one line, or the result as JSON.",
    )
    bench.add_argument("target", metavar="module:function", help="the function to time")
    bench.add_argument("--backend", metavar="NAME", help="backend as NAME or NAME:DEVICE")
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    bench.add_argument("--setup", metavar="module:function", help="run before every call")
    bench.add_argument("--warmup-ms", type=_finite, default=25.0, help="warm-up cap (ms)")
    bench.add_argument("--rep-ms", type=_finite, default=100.0, help="timed calls' cap (ms)")
    bench.add_argument(
        "--noise-target", type=_finite, default=0.01, help="stop at this relative noise"
    )
    bench.add_argument("--min-n", type=int, default=10, help="readings before stopping early")
    bench.add_argument("--calls-per-window", type=int, help="calls per window (default: auto)")
    bench.add_argument(
        "--hold-stream",
        action="store_true",
        help="hold the stream until each batch is enqueued (calls run back to back)",
    )
    bench.add_argument(
        "--cold-cache",
        action=argparse.BooleanOptionalAction,
        help="write over the device's L2 cache before each call (default: where the backend can)",
    )
    bench.add_argument(
        "--graph", action="store_true", help="capture the calls into a graph and time its launches"
    )
    bench.set_defaults(run=run_bench)


def _finite(text: str) -> float:
    # float() also reads "nan" and "inf", which no budget or fraction can be: refused as a
    # usage error naming the option, as argparse refuses a word.
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _load(target: str) -> Callable[[Any], object]:
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected module:function, got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        value = pkgutil.resolve_name(target)  # imports the module, then reads each attribute
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from exc
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(value):
        raise ValueError(f"{target} is not callable")
    return value  # type: ignore[no-any-return]


def run_bench(args: argparse.Namespace, out: TextIO) -> int:
    """Run the command; 0 on success, 1 when the function raised (its error on stderr).

    Raises :class:`ValueError` for a bad target or option (the caller's usage error) and
    :class:`~eventapi.EventApiError` from the backend.
    """
    from .._bench import bench
    from .._plugins._selection import ENV_BACKEND, backend

    if args.backend is not None:
        os.environ[ENV_BACKEND] = args.backend
    fn = _load(args.target)
    setup = _load(args.setup) if args.setup is not None else None
    api = backend(args.backend)
    try:
        result = bench(
            fn,
            api=api,
            setup=setup,
            warmup_ms=args.warmup_ms,
            rep_ms=args.rep_ms,
            noise_target=args.noise_target,
            min_n=args.min_n,
            hold_stream=args.hold_stream,
            calls_per_window=args.calls_per_window,
            cold_cache=args.cold_cache,
            graph=args.graph,
        )
    except (ValueError, EventApiError):
        raise
    except Exception as exc:  # what fn or setup raised: theirs, reported, not a crash
        print(f"eventapi bench: {args.target} raised {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        out.write(json.dumps({"target": args.target, **result.as_dict()}) + "\n")
    else:
        out.write(f"{args.target} on {result.describe()}\n")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
