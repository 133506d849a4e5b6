"""What a plugin's probe needs: a driver library's answers through :mod:`ctypes`, and an
installed distribution's version.

A probe runs in every process that lists backends, so this module is light: importing it costs
nothing beyond :mod:`os` (``import eventapi.driverkit.probe`` does not import the handle layer,
which :mod:`eventapi.driverkit` loads only when one of its names is read), and :mod:`ctypes` is
imported on the first call that needs it. A plugin module imports these from here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._metadata import name_and_version

if TYPE_CHECKING:
    import ctypes

__all__ = ["c_int_out", "installed_version", "open_driver_library"]


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


def installed_version(distribution: str) -> str | None:
    """The version of the installed ``distribution``, or None when it is not installed.

    What ``importlib.metadata.version`` answers, read from the header of its metadata.
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(distribution)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    return name_and_version(dist)[1]
