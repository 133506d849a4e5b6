"""gather_chrome_trace: the ranks of a real torch.distributed job (gloo, CPU) write one trace.

Three processes join a gloo group through a file store; each times one window on ``host``
after the previous rank told it (a point-to-point message sent once that rank's window end was
stamped), then all gather, and rank 0 writes the merged trace. Skipped where torch is not
installed (the dev requirements install its CPU build on CPython 3.11 only).
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
from pathlib import Path

import pytest

import eventapi
from eventapi.trace import gather_chrome_trace

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install torch==2.13.0, the CPU build, on CPython 3.11)",
)

RANKS = 3
JOIN_S = 120.0  # generous: three interpreters importing torch on a busy two-core machine


def _rank(rank: int, store: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=RANKS)
    try:
        baton = torch.zeros(1)
        with eventapi.EventProfiler(eventapi.backend("host"), label=f"rank{rank}") as prof:
            if rank > 0:
                dist.recv(baton, src=rank - 1)
            with prof.window(f"rank {rank}"):
                pass
            prof.collect()  # the end is stamped before the next rank hears of it
            if rank < RANKS - 1:
                dist.send(baton, dst=rank + 1)
            gather_chrome_trace(out, prof)
    finally:
        dist.destroy_process_group()


def test_rank_zero_writes_every_ranks_windows_in_the_order_they_ran(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    out = tmp_path / "all.json"
    workers = [
        context.Process(target=_rank, args=(rank, str(tmp_path / "store"), str(out)))
        for rank in range(RANKS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_S)
        assert worker.exitcode == 0, f"a rank failed (exit code {worker.exitcode})"

    merged = json.loads(out.read_text())
    assert merged["otherData"]["eventapi"]["clock"]["kind"] == "monotonic"  # one host
    windows = {e["name"]: e for e in merged["traceEvents"] if e["ph"] == "X"}
    assert sorted(windows) == [f"rank {r}" for r in range(RANKS)]
    assert len({e["pid"] for e in windows.values()}) == RANKS
    for rank in range(1, RANKS):
        before, after = windows[f"rank {rank - 1}"], windows[f"rank {rank}"]
        bound_us = (before["args"]["uncertainty_ns"] + after["args"]["uncertainty_ns"]) / 1000
        assert after["ts"] - (before["ts"] + before["dur"]) >= -bound_us


def test_without_an_initialised_group_it_says_what_to_do_instead(tmp_path: Path) -> None:
    with (
        eventapi.EventProfiler(eventapi.backend("host")) as prof,
        pytest.raises(RuntimeError, match="merge"),
    ):
        gather_chrome_trace(tmp_path / "t.json", prof)
