"""What a captured graph and a cache-flush buffer share: one owner, and a safety net.

``eventapi_cuda._owned`` and ``eventapi_hip._owned`` are this one file, as ``_graphs.py`` and
``_cache.py``, its users, are. Each object holds a driver resource its user destroys through
the backend object (``graph_destroy``, ``cache_flush_destroy``). ``copy``, ``deepcopy`` and
``pickle`` raise :class:`TypeError`, since a second owner would destroy it twice; one dropped
without its destroy is destroyed by its finalizer, and logged, except at interpreter shutdown.
"""

from __future__ import annotations

import logging
import sys
from typing import ClassVar, NoReturn

__all__ = ["Owned"]

_log = logging.getLogger("eventapi")


class Owned:
    """Base of an object with one owner: a subclass names its destroy and spells two methods."""

    __slots__ = ()

    _DESTROY: ClassVar[str]
    """The backend call that destroys it, named in the finalizer's warning."""

    @property
    def closed(self) -> bool:
        """True once the object was destroyed."""
        raise NotImplementedError

    def _destroy(self) -> None:
        """Destroy it through its backend object."""
        raise NotImplementedError

    def _refuse_copy(self, *_: object) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be copied or pickled: it has exactly one owner; "
            "pass the same object around instead"
        )

    # copy.copy, copy.deepcopy (with a memo) and pickle (with a protocol) each call one of these.
    __copy__ = __deepcopy__ = __reduce_ex__ = _refuse_copy

    def __del__(self) -> None:
        if self.closed or sys.is_finalizing():
            return
        _log.warning("%s was dropped without %s(); destroying it", self, self._DESTROY)
        try:
            self._destroy()
        except Exception:
            _log.warning("%s: destroying it after it was dropped failed", self, exc_info=True)
