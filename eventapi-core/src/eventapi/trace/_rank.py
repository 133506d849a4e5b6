"""Which rank of a distributed job this process is, so that its trace says so.

Asked in this order, the first that answers wins:

* ``torch.distributed``, when the program imported it and initialised a group: the global rank
  and world size. It is looked up in ``sys.modules``, never imported here: importing torch takes
  seconds, and a program that did not import it has no group.
* The variables launchers set: ``RANK`` (torchrun, also ``LOCAL_RANK`` and ``WORLD_SIZE``),
  ``OMPI_COMM_WORLD_RANK`` (Open MPI's ``mpirun``, with ``OMPI_COMM_WORLD_SIZE``),
  ``SLURM_PROCID`` (``srun``, with ``SLURM_NTASKS``); ``LOCAL_RANK`` alone names the process by
  its rank on this node.

A variable that does not hold a non-negative integer is ignored: a trace is never refused for
what a launcher left in the environment.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["process_title", "rank_info"]

_ENVIRONMENT: Final = (
    ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)


def _number(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _torch() -> dict[str, object] | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        rank, world = dist.get_rank(), dist.get_world_size()
    except Exception:  # a half-torn-down group: the trace does without the rank
        return None
    if not isinstance(rank, int) or rank < 0:
        return None
    return _info(rank, "torch.distributed", world)


def _launcher() -> dict[str, object] | None:
    for rank_name, size_name in _ENVIRONMENT:
        rank = _number(rank_name)
        if rank is not None:
            return _info(rank, rank_name, _number(size_name))
    return None


def _info(rank: int, source: str, world: object) -> dict[str, object]:
    """``rank``, what said so, and the world's size where it is one (a positive int)."""
    info: dict[str, object] = {"rank": rank, "rank_from": source}
    if isinstance(world, int) and world > 0:
        info["world_size"] = world
    return info


def rank_info() -> dict[str, object]:
    """``rank``, ``rank_from`` and where known ``world_size`` and ``local_rank``; or ``{}``."""
    info = _torch() or _launcher()
    local = _number("LOCAL_RANK")
    if info is None:
        return {} if local is None else {"local_rank": local, "rank_from": "LOCAL_RANK"}
    if local is not None:
        info["local_rank"] = local
    return info


def process_title(host: str, pid: int, info: dict[str, object]) -> str:
    """The process track's name: ``"rank 3 (node7 pid 4242)"``, or ``"node7 pid 4242"``."""
    where = f"{host} pid {pid}"
    if isinstance(info.get("rank"), int):
        return f"rank {info['rank']} ({where})"
    if isinstance(info.get("local_rank"), int):
        return f"local rank {info['local_rank']} ({where})"
    return where
