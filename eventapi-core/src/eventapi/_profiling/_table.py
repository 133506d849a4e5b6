"""A profiler's summary as a text table for people, as ``key_averages().table()`` prints one.

One row per name, sorted (by total time unless asked otherwise), a header, and each duration
column in one unit chosen for its largest value, so that a column reads down and a row can be
pasted into an issue as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    """The scale and name of the largest unit ``largest`` reaches (ns for 0)."""
    return next((unit for unit in _UNITS if largest >= unit[0]), _UNITS[-1])


def _number(ns: int, scale: int) -> str:
    if scale == 1:
        return str(ns)
    value = ns / scale
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def _line(cells: Sequence[str], widths: list[int]) -> str:
    """A line of the table: the name left-aligned in its column, each number right-aligned."""
    return "  ".join(
        cell.ljust(width) if i == 0 else cell.rjust(width)
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
    )


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
    shown = rows[:limit]
    # Each column with its title on top.
    columns = [["name", *(name for name, _ in shown)], ["count", *(str(s.count) for _, s in shown)]]
    for title, field in _DURATIONS:
        values = [getattr(s, field) for _, s in shown]
        scale, unit = _unit(max(values, default=0))
        columns.append([f"{title} ({unit})", *(_number(v, scale) for v in values)])
    widths = [max(map(len, column)) for column in columns]
    header, *body = (_line(cells, widths) for cells in zip(*columns, strict=True))
    lines = [f"{label}: {len(stats)} names, {sum(s.count for s in stats.values())} windows"]
    lines += [header, "  ".join("-" * w for w in widths), *body]
    if len(shown) < len(rows):
        lines.append(f"({len(rows) - len(shown)} more names not shown)")
    if not rows:
        lines.append("(no window collected yet)")
    return "\n".join(lines) + "\n"
