"""Checks of what public calls are given: a refusal names the argument and says what fits.

A value of the wrong type raises :class:`TypeError`; a number that is not finite, or out of the
range the call takes, :class:`ValueError`; both before any work is done. A message shows the
value through :func:`bounded_repr`, which never builds the whole ``repr`` of a hostile value (a
list nested 100,000 deep would raise :class:`RecursionError`, a string of ten million characters
would make the message as long).

Numbers are taken as the standard library takes a timeout: any object ``float()`` converts
through ``__float__`` or ``__index__`` (``int``, ``float``, ``fractions.Fraction``,
``decimal.Decimal``, NumPy's scalars), never a ``str`` (which ``float()`` would parse) nor a
``bool`` (a flag given where a number belongs is a mistake, not a 0 or a 1).
"""

from __future__ import annotations

import math
import operator
import reprlib
from typing import Final, SupportsFloat, SupportsIndex

__all__ = ["bounded_repr", "check_bool", "check_int", "check_path_text", "check_real"]

_REPR: Final = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlevel = 3


def bounded_repr(value: object) -> str:
    """``repr(value)`` cut short: at most a few dozen characters of each part, three levels deep.

    Never raises: a value whose ``repr`` fails (or an ``int`` too long to print) is named by
    its type.
    """
    try:
        return _REPR.repr(value)
    except Exception:  # an int past the digit limit, a __repr__ that raises
        return f"<{type(value).__qualname__} object>"


def check_real(value: object, what: str, *, unit: str = "") -> float:
    """``value`` as a finite ``float``; ``what`` names the argument in the refusal.

    Raises :class:`TypeError` unless ``value`` is a number (see the module docstring), and
    :class:`ValueError` when it is NaN, infinite or too large for a float. ``unit`` (such as
    ``"milliseconds"``) is said in the messages.
    """
    if type(value) is float:
        number = value
    else:
        if isinstance(value, bool) or not isinstance(value, SupportsFloat | SupportsIndex):
            raise TypeError(
                f"{what} must be a number{_of(unit)}, not {type(value).__qualname__} "
                f"{bounded_repr(value)}"
            )
        try:
            number = float(value)
        except (OverflowError, ValueError):  # past a float's range; a signaling NaN
            number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number{_of(unit)}, got {bounded_repr(value)}")
    return number


def check_int(value: object, what: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (an object with ``__index__``, not a ``bool``), ``>= minimum``.

    Raises :class:`TypeError` for a value that is not an integer (a ``float`` included, even a
    whole one: ``2.0`` as a count is a mistake to report), :class:`ValueError` below ``minimum``.
    """
    if type(value) is int:
        number = value
    else:
        if isinstance(value, bool) or not isinstance(value, SupportsIndex):
            raise TypeError(
                f"{what} must be an int, not {type(value).__qualname__} {bounded_repr(value)}"
            )
        number = operator.index(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {bounded_repr(number)}")
    return number


def check_bool(value: object, what: str) -> bool:
    """``value`` when it is ``True`` or ``False``; :class:`TypeError` for anything else.

    A flag given a string (``"no"``) or a number would otherwise count as true.
    """
    if value is True or value is False:
        return value
    raise TypeError(
        f"{what} must be True or False, not {type(value).__qualname__} {bounded_repr(value)}"
    )


_PATH_MAX: Final = 4096
"""Linux's limit on a path given to a system call, its terminating NUL included. A longer one is
refused by the kernel anyway (a library's name that long is worse: the dynamic loader copies it
onto the stack, and a name of megabytes crashes the process instead of failing to load), and
would make the message that names it as long."""


def check_path_text(path: str, what: str, instead: str) -> str:
    """``path`` unless it is empty (then :class:`ValueError` says to pass ``instead``), longer
    than a system call takes, or holds a NUL character; ``what`` names it in the refusal."""
    if not path:
        raise ValueError(f"{what} is empty; pass {instead}")
    if len(path) >= _PATH_MAX:
        raise ValueError(
            f"{what} is {len(path):,} characters long ({bounded_repr(path)}); a path holds at "
            f"most {_PATH_MAX - 1} bytes"
        )
    if "\0" in path:
        raise ValueError(
            f"{what} holds a NUL character ({bounded_repr(path)}), which no file name can hold"
        )
    return path


def _of(unit: str) -> str:
    return f" of {unit}" if unit else ""
