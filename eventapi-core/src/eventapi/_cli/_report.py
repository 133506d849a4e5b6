"""How ``eventapi check`` reports: a table or JSON of the checks, and the spans as a trace.

:func:`report` prints what :func:`~eventapi._cli._check.check_backend` returned, writes the
spans the checks read as a Chrome trace when asked, and decides the exit status. Running the
checks is :mod:`eventapi._cli._check`'s; choosing the backends is the command's. :func:`table`
lays out the tables of ``eventapi check`` and ``eventapi backends`` alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ._check import BackendReport

__all__ = ["report", "table"]


def report(
    reports: Sequence[BackendReport],
    *,
    as_json: bool = False,
    trace: str | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Print ``reports`` as a table (or JSON), write the trace if asked; return the exit status.

    The trace is what :func:`eventapi.trace.export_chrome_trace` writes of the checks'
    profilers, whole or not at all: this process's track, one track per backend, device and
    stream label, so it opens in ``chrome://tracing`` and Perfetto and merges with other traces
    (``eventapi trace merge``). The status is 1 when any check failed or the trace could not
    be written, else 0.
    """
    rows = [r for rep in reports for r in rep.results]
    if as_json:
        out.write(json.dumps([r._asdict() for r in rows], indent=2) + "\n")
    else:
        header = ("BACKEND", "CHECK", "RESULT", "DETAIL")
        out.write(table([header, *((r.backend, r.check, r.result, r.detail) for r in rows)]) + "\n")
        if not rows:
            out.write("(no backend was checked)\n")
    status = 1 if any(rep.failed for rep in reports) or not reports else 0
    if trace is not None:
        from ..trace import export_chrome_trace

        try:
            export_chrome_trace(trace, *(profiler for rep in reports for profiler in rep.profilers))
        except OSError as exc:
            print(f"eventapi check: cannot write the trace to {trace}: {exc}", file=sys.stderr)
            status = 1
    return status


def table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (a header first, where there is one) as lines of columns two spaces apart, each
    column as wide as its widest cell but the last, which is not padded."""
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    widths[-1] = 0
    lines = ("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)
