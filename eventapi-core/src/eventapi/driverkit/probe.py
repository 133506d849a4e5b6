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

from .._arguments import bounded_repr, check_path_text
from .._metadata import version_of

if TYPE_CHECKING:
    import ctypes

__all__ = ["c_int_out", "installed_version", "open_driver_library"]


def open_driver_library(names: Sequence[str | bytes]) -> ctypes.CDLL | None:
    """The first of ``names`` that is already mapped into the process or can be loaded.

    A library preloaded (``LD_PRELOAD``) or loaded by another package is found by its soname
    without a search, which ``ctypes.util.find_library`` would miss; otherwise a real
    ``dlopen`` is tried, which is what the binding will do next anyway.

    ``names`` is a sequence of sonames or paths (``str``, ``bytes`` or ``os.PathLike``): one
    name given alone raises :class:`TypeError` (its characters would be tried as names), and
    so does an element of another type; an empty name, one holding a NUL character or one
    longer than a path can be raises :class:`ValueError`. Each is checked before any is loaded.
    """
    import ctypes

    if isinstance(names, str | bytes | os.PathLike):
        raise TypeError(
            f"open_driver_library: names must be a sequence of library names, not a single "
            f"{type(names).__name__}: pass [{bounded_repr(names)}]"
        )
    if not isinstance(names, Sequence):
        raise wrong_type(
            "open_driver_library: names", "a sequence of library names (a list of str)", names
        )
    paths = [_library_name(name, index) for index, name in enumerate(names)]
    # Where the platform can ask for a library only if it is mapped already, that first.
    noload = getattr(os, "RTLD_NOLOAD", 0)
    modes = (noload | ctypes.RTLD_GLOBAL, ctypes.DEFAULT_MODE) if noload else (ctypes.DEFAULT_MODE,)
    for path in paths:
        for mode in modes:
            try:
                return ctypes.CDLL(path, mode=mode)
            except OSError:
                pass
    return None


def _library_name(name: object, index: int) -> str:
    what = f"open_driver_library: names[{index}]"
    if not isinstance(name, str | bytes | os.PathLike):
        raise wrong_type(what, "a str, bytes or os.PathLike", name)
    # dlopen("") answers with the main program, which is no driver library.
    return check_path_text(os.fsdecode(name), what, "a library's name")


def c_int_out(library: ctypes.CDLL, function: str) -> tuple[int, int]:
    """Call ``status function(int *out)`` through ctypes; return ``(status, out)``.

    A symbol the library lacks gives status -1. Raises :class:`TypeError` when ``library`` is
    not a :class:`ctypes.CDLL` (what :func:`open_driver_library` returns) or ``function`` not
    a ``str``.
    """
    import ctypes

    if not isinstance(library, ctypes.CDLL):
        raise wrong_type(
            "c_int_out: library", "a ctypes.CDLL (open_driver_library returns one)", library
        )
    if not isinstance(function, str):
        raise wrong_type("c_int_out: function", "the symbol's name as a str", function)
    fn = getattr(library, function, None)
    if fn is None:
        return -1, 0
    fn.restype = ctypes.c_int
    out = ctypes.c_int(0)
    return int(fn(ctypes.byref(out))), out.value


def installed_version(distribution: str) -> str | None:
    """The version of the installed ``distribution``, or None when it is not installed.

    What ``importlib.metadata.version`` answers, read from the header of its metadata.
    Raises :class:`TypeError` when ``distribution`` is not a ``str``.
    """
    if not isinstance(distribution, str):
        raise wrong_type(
            "installed_version: distribution", "a distribution's name as a str", distribution
        )
    return version_of(distribution)


def wrong_type(what: str, expected: str, value: object) -> TypeError:
    """The :class:`TypeError` for the argument ``what``, given ``value``: it must be ``expected``.

    How every helper of :mod:`eventapi.driverkit` refuses an argument of the wrong type; not
    part of the public face (``__all__``).
    """
    return TypeError(
        f"{what} must be {expected}, not {type(value).__qualname__} {bounded_repr(value)}"
    )
