"""Ranks: a trace of a distributed job's process says which rank wrote it.

Each case runs a real child interpreter with the variables a launcher sets (torchrun, mpirun,
srun); torch.distributed itself is tested in test_trace_distributed.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eventapi.trace import merge, write_report

CHILD_S = 60.0  # generous: an interpreter starting on a busy two-core machine

WRITE = """
import sys, eventapi
from eventapi.host import HostBackend
with eventapi.EventProfiler(HostBackend(), label="compute") as prof:
    with prof.window(sys.argv[2]):
        pass
    prof.collect()
    prof.export_chrome_trace(sys.argv[1])
print("torch" in sys.modules)
"""

LAUNCHERS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def _write(path: Path, window: str, **environment: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHERS and "SLURM" not in k}
    env.update(environment)
    result = subprocess.run(
        [sys.executable, "-c", WRITE, str(path), window],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_S,
        check=True,
    )
    assert result.stdout == "False\n"  # the rank was found without importing torch
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _process(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (name,) = [e["args"] for e in document["traceEvents"] if e["name"] == "process_name"]
    return name["name"], document["otherData"]["eventapi"]


@pytest.mark.parametrize(
    ("environment", "title", "info"),
    [
        (
            {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"},
            "rank 3 (",
            {"rank": 3, "rank_from": "RANK", "local_rank": 1, "world_size": 8},
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6"},
            "rank 5 (",
            {"rank": 5, "rank_from": "OMPI_COMM_WORLD_RANK", "world_size": 6},
        ),
        ({"SLURM_PROCID": "2"}, "rank 2 (", {"rank": 2, "rank_from": "SLURM_PROCID"}),
        ({"LOCAL_RANK": "4"}, "local rank 4 (", {"local_rank": 4, "rank_from": "LOCAL_RANK"}),
        ({"RANK": "not-a-number"}, "", {}),
        ({}, "", {}),
    ],
    ids=["torchrun", "mpirun", "srun", "local-only", "garbage", "none"],
)
def test_the_process_is_named_by_the_rank_its_launcher_gave(
    environment: dict[str, str], title: str, info: dict[str, Any], tmp_path: Path
) -> None:
    name, process = _process(_write(tmp_path / "t.json", "w", **environment))
    assert re.fullmatch(rf"{re.escape(title)}\S+ pid \d+\)?", name), name
    for key in ("rank", "rank_from", "world_size", "local_rank"):
        assert process.get(key) == info.get(key), key


def test_a_merge_and_its_report_keep_every_rank_in_rank_order(tmp_path: Path) -> None:
    # Written in the order 2, 0, 1: process ids rise that way, ranks do not.
    paths = []
    for rank in (2, 0, 1):
        path = tmp_path / f"rank{rank}.json"
        _write(path, f"work of rank {rank}", RANK=str(rank), WORLD_SIZE="3")
        paths.append(path)
    merge(paths, tmp_path / "all.json")
    merged = json.loads((tmp_path / "all.json").read_text())
    sources = merged["otherData"]["eventapi"]["sources"]
    assert [s["rank"] for s in sources] == [2, 0, 1]
    names = [e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"]
    assert [n.split(" (")[0] for n in names] == ["rank 2", "rank 0", "rank 1"]
    # Perfetto orders processes by their sort index: the rank.
    order = {
        e["pid"]: e["args"]["sort_index"]
        for e in merged["traceEvents"]
        if e["name"] == "process_sort_index"
    }
    assert sorted(order.values()) == [0, 1, 2]

    write_report(tmp_path / "all.json")
    page = (tmp_path / "all.html").read_text()
    data = json.loads(re.search(r'id="trace-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    assert [row["process"].split(" (")[0] for row in data["rows"]] == [
        "rank 0",
        "rank 1",
        "rank 2",
    ]
    rows = re.findall(r"<tr><th scope='row'>(rank \d) \(", page)
    assert rows == ["rank 0", "rank 1", "rank 2"]  # the per-process table
