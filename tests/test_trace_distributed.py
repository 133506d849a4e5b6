"""gather_chrome_trace: the ranks of a real torch.distributed job (gloo, CPU) write one trace.

Three processes (real interpreters) join a gloo group through a file store; each first checks
that the helper refuses to run before the group exists, then times one window on ``host`` after
the previous rank told it (a point-to-point message sent once that rank's window end was
stamped), then all gather, and rank 0 writes the merged trace. Skipped where torch is not
installed (requirements-test.txt installs its CPU build on CPython 3.11 only).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# The torch tier (docs/testing.md): `make test-torch` installs torch first.
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (pip install torch==2.13.0, the CPU build, on CPython 3.11)",
    ),
]

RANKS = 3
JOIN_S = 120.0  # generous: three interpreters importing torch on a busy two-core machine


# One rank, run as its own interpreter (``python -c``): it imports only what a rank needs, so
# three of them start in about the time torch takes to import.
RANK = """
import sys
import torch
import torch.distributed as dist
import eventapi
from eventapi.trace import gather_chrome_trace

rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
with eventapi.EventProfiler(eventapi.backend("host")) as early:
    try:  # before the group exists: refused, saying what to do instead
        gather_chrome_trace(out, early)
        sys.exit("gather_chrome_trace ran without an initialised group")
    except RuntimeError as exc:
        assert "merge" in str(exc), exc
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
try:
    baton = torch.zeros(1)
    with eventapi.EventProfiler(eventapi.backend("host"), label=f"rank{rank}") as prof:
        if rank > 0:
            dist.recv(baton, src=rank - 1)
        with prof.window(f"rank {rank}"):
            pass
        prof.collect()  # the end is stamped before the next rank hears of it
        if rank < world - 1:
            dist.send(baton, dst=rank + 1)
        gather_chrome_trace(out, prof)
finally:
    dist.destroy_process_group()
"""


def test_rank_zero_writes_every_ranks_windows_in_the_order_they_ran(tmp_path: Path) -> None:
    out = tmp_path / "all.json"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), str(RANKS), str(tmp_path / "store"), str(out)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(RANKS)
    ]
    for process in processes:
        _, err = process.communicate(timeout=JOIN_S)
        assert process.returncode == 0, err

    merged = json.loads(out.read_text())
    assert merged["otherData"]["eventapi"]["clock"]["kind"] == "monotonic"  # one host
    windows = {e["name"]: e for e in merged["traceEvents"] if e["ph"] == "X"}
    assert sorted(windows) == [f"rank {r}" for r in range(RANKS)]
    assert len({e["pid"] for e in windows.values()}) == RANKS
    # Each process is named by its rank in torch.distributed, in the tracks and the sources.
    names = {e["pid"]: e["args"] for e in merged["traceEvents"] if e["name"] == "process_name"}
    for rank in range(RANKS):
        process = names[windows[f"rank {rank}"]["pid"]]
        assert process["name"].startswith(f"rank {rank} ("), process
        assert process["rank"] == rank
    sources = merged["otherData"]["eventapi"]["sources"]
    assert [(s["rank"], s["rank_from"], s["world_size"]) for s in sources] == [
        (rank, "torch.distributed", RANKS) for rank in range(RANKS)
    ]
    for rank in range(1, RANKS):
        before, after = windows[f"rank {rank - 1}"], windows[f"rank {rank}"]
        bound_us = (before["args"]["uncertainty_ns"] + after["args"]["uncertainty_ns"]) / 1000
        assert after["ts"] - (before["ts"] + before["dur"]) >= -bound_us
