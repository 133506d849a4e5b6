"""What a plugin's probe needs to ask a driver library questions through :mod:`ctypes`.

Kept apart from the handle layer (:mod:`eventapi.driverkit` re-exports both names) because a
probe runs in every process that lists backends: importing these two functions costs nothing
beyond :mod:`os`, and :mod:`ctypes` is imported on the first call.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

__all__ = ["c_int_out", "open_driver_library"]


def open_driver_library(names: Sequence[str | bytes]) -> ctypes.CDLL | None:
    """The first of ``names`` that is already mapped into the process or can be loaded.

    A library preloaded (``LD_PRELOAD``) or loaded by another package is found by its soname
    without a search, which ``ctypes.util.find_library`` would miss; otherwise a real
    ``dlopen`` is tried, which is what the binding will do next anyway.
    """
    import ctypes

    noload = getattr(os, "RTLD_NOLOAD", 0)
    for name in names:
        path = os.fsdecode(name)
        if noload:
            try:
                return ctypes.CDLL(path, mode=noload | ctypes.RTLD_GLOBAL)
            except OSError:
                pass
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def c_int_out(library: ctypes.CDLL, function: str) -> tuple[int, int]:
    """Call ``status function(int *out)`` through ctypes; return ``(status, out)``.

    A symbol the library lacks gives status -1.
    """
    import ctypes

    fn = getattr(library, function, None)
    if fn is None:
        return -1, 0
    fn.restype = ctypes.c_int
    out = ctypes.c_int(0)
    status = int(fn(ctypes.byref(out)))
    return status, out.value
