"""Profiling windows on a stream, read back in one batch and placed on the host clock.

:mod:`._profiler` holds :class:`~eventapi.EventProfiler` and its one-shot
:class:`~eventapi.Window`; :mod:`._span` the values users read back (:class:`~eventapi.Span`,
:class:`~eventapi.Stats`); :mod:`._anchor` the anchor that places device events on
``time.perf_counter_ns()`` with a stated bound, and the clock-rate estimate; :mod:`._sketch`
the bounded-memory summary of each name's durations; :mod:`._table` that summary as a table;
:mod:`._graphs` the windows recorded into captured graphs; :mod:`._nvtx` and :mod:`._roctx` the
ranges of profiling tools (NVTX on ``cuda``, roctx on ``hip``).

It builds on the backend protocol only (:mod:`eventapi._protocol`); any backend object works.
"""
