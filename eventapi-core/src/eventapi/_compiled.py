"""What the compiled build of the core reads from its source, at no cost to the pure one.

The build (``make compiled``, :doc:`/native`) compiles a few modules with mypyc, which reads
``mypyc_attr`` decorations off the classes. The pure-Python core, the reference that installs
everywhere, does not depend on ``mypy_extensions``: at run time the decorator here returns the
class unchanged, and only mypy (and so mypyc) sees the real one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

__all__ = ["mypyc_attr"]

_T = TypeVar("_T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        return lambda cls: cls
