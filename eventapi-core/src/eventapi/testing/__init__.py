"""The eventapi conformance kit: a pytest suite every backend runs with one command.

::

    python -m pytest --pyargs eventapi.testing --eventapi-backend=NAME

It checks every member of :class:`eventapi.EventApi` and every optional capability the backend
declares against the contract, across threads, with typed errors, and, where the backend counts
its live handles, for leaks; and hypothesis state machines run random call sequences, valid and
invalid, against a model (``--eventapi-fuzz-examples=N`` sets their budget; without hypothesis
they are skipped). The pytest plugin (:mod:`eventapi.testing.plugin`, registered
through the ``pytest11`` entry point ``eventapi.testing``) provides the ``eventapi_`` fixtures;
:class:`Kit`, :class:`Hold` and :class:`Waiter` are the types they hand to a test, for backend
authors who add tests of their own. See ``docs/conformance.md``.

Importing this package (which pytest does in every run, to load the plugin) imports nothing
beyond ``eventapi`` itself, which scans no plugin and loads no driver binding; hypothesis is
imported only by the state machines' module, when the kit is collected. A run that does not ask
for the kit must not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._kit import Hold, Kit, Waiter

__all__ = ["Hold", "Kit", "Waiter"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import _kit

        return getattr(_kit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
