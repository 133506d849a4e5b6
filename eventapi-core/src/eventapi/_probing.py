"""What a plugin's probe needs: a driver library's answers through :mod:`ctypes`, and an
installed distribution's version.

Kept apart from the handle layer (:mod:`eventapi.driverkit` re-exports the ctypes helpers)
because a probe runs in every process that lists backends: importing these functions costs
nothing beyond :mod:`os`; :mod:`ctypes` is imported on the first call that needs it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes
    from importlib.metadata import Distribution

__all__ = ["c_int_out", "installed_version", "name_and_version", "open_driver_library"]


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


def name_and_version(dist: Distribution) -> tuple[str, str]:
    """The distribution's ``Name`` and ``Version``, read from its metadata's header.

    ``dist.name`` and ``dist.version`` each parse the whole metadata file with the email
    package (imported for it: about 0.7 ms, then a parse per field); both fields are single
    header lines, so reading the header up to its first blank line finds them at a fraction of
    the cost. Falls back to importlib.metadata where the header lacks either.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the header ends at the first blank line
        if line[0].isspace():
            continue  # a continuation of the field before
        key, colon, value = line.partition(":")
        key = key.strip().lower()
        if colon and key in ("name", "version"):
            found.setdefault(key, value.strip())
    if "name" in found and "version" in found:
        return found["name"], found["version"]
    return dist.name, dist.version


def installed_version(distribution: str) -> str | None:
    """The version of the installed ``distribution``, or None when it is not installed.

    What ``importlib.metadata.version`` answers, read as :func:`name_and_version` reads it.
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(distribution)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    return name_and_version(dist)[1]
