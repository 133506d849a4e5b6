"""Objects that own driver handles refuse to be copied or pickled.

A copy of a fence, a profiler or a window would be a second owner of the same events: each
would release them, and the survivor would reach the driver with a freed handle. ``copy``,
``deepcopy`` and ``pickle`` all go through ``__reduce_ex__`` (or ``__copy__`` /
``__deepcopy__``), so refusing there refuses every route before a half-built second object
exists whose finalizer could run or print.
"""

from __future__ import annotations

from typing import ClassVar, NoReturn

__all__ = ["SingleOwner"]


class SingleOwner:
    """Mixin: copying or pickling raises :class:`TypeError` with the class's ``_COPY_HINT``."""

    __slots__ = ()

    _COPY_HINT: ClassVar[str] = "share the object itself"

    def _refuse_copy(self, *_: object) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be copied or pickled: it owns driver handles, which "
            f"have exactly one owner; {self._COPY_HINT}"
        )

    # copy.copy, copy.deepcopy (with a memo) and pickle (with a protocol) each call one of these.
    __copy__ = __deepcopy__ = __reduce_ex__ = _refuse_copy
