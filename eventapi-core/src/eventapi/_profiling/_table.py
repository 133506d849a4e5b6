"""A profiler's summary as a text table for people, as ``key_averages().table()`` prints one.

One row per name, sorted (by total time unless asked otherwise), a header, and each duration
column in one unit chosen for its largest value, so that a column reads down and a row can be
pasted into an issue as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .._arguments import bounded_repr, check_int
from ._span import Stats

__all__ = ["SORT_KEYS", "stats_table"]

# Column -> the Stats field it shows; the order is the table's.
_DURATIONS: Final = (
    ("total", "total_ns"),
    ("mean", "mean_ns"),
    ("median", "median_ns"),
    ("min", "min_ns"),
    ("max", "max_ns"),
)
SORT_KEYS: Final = ("total", "count", "mean", "median", "min", "max", "name")
_UNITS: Final = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"), (1, "ns"))


def _unit(largest: int) -> tuple[int, str]:
    for scale, name in _UNITS:
        if largest >= scale:
            return scale, name
    return 1, "ns"


def _number(ns: int, scale: int) -> str:
    if scale == 1:
        return str(ns)
    value = ns / scale
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def stats_table(
    stats: Mapping[str, Stats], *, label: str, sort_by: str = "total", limit: int | None = None
) -> str:
    """The table of ``stats`` (a profiler's :meth:`summary`), titled with ``label``.

    Raises :class:`ValueError` for a ``sort_by`` not in :data:`SORT_KEYS` or a negative
    ``limit``.
    """
    if type(sort_by) is not str or sort_by not in SORT_KEYS:
        raise ValueError(
            f"table: sort_by must be one of {', '.join(SORT_KEYS)}; got {bounded_repr(sort_by)}"
        )
    if limit is not None:
        limit = check_int(limit, "table: limit (an int >= 0, or None)", minimum=0)
    if sort_by == "name":
        rows = sorted(stats.items())
    else:
        field = "count" if sort_by == "count" else dict(_DURATIONS)[sort_by]
        rows = sorted(stats.items(), key=lambda item: (-getattr(item[1], field), item[0]))
    shown = rows if limit is None else rows[:limit]
    header = ["name", "count"]
    columns: list[list[str]] = [[name for name, _ in shown], [str(s.count) for _, s in shown]]
    for title, field in _DURATIONS:
        values = [getattr(s, field) for _, s in shown]
        scale, unit = _unit(max(values, default=0))
        header.append(f"{title} ({unit})")
        columns.append([_number(v, scale) for v in values])
    widths = [max([len(h), *(len(c) for c in col)]) for h, col in zip(header, columns, strict=True)]
    lines = [f"{label}: {len(stats)} names, {sum(s.count for s in stats.values())} windows"]
    lines.append(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    lines.append("  ".join("-" * w for w in widths))
    for r in range(len(shown)):
        cells = [col[r] for col in columns]
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    if len(shown) < len(rows):
        lines.append(f"({len(rows) - len(shown)} more names not shown)")
    if not rows:
        lines.append("(no window collected yet)")
    return "\n".join(line.rstrip() for line in lines) + "\n"
