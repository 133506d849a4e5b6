"""``eventapi.bench``: time a callable on a stream, with a stated noise that holds at every n.

``_stats`` holds the statistics (order statistics of the median, the trend test), ``_result``
the values handed back, ``_run`` the loop that calls and times.
"""

from __future__ import annotations

from ._result import BenchResult, Comparison
from ._run import bench

__all__ = ["BenchResult", "Comparison", "bench"]
