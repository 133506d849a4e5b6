"""The ``eventapi`` logger, for modules that log only when something goes wrong.

:func:`logger` imports :mod:`logging` on its first call. Discovery logs only when a plugin
misbehaves, so a process that lists well-behaved backends does not import :mod:`logging`
(about 2 ms in a fresh interpreter, a large share of what listing adds to pluggy and the entry
point scan). Modules on paths that need :mod:`logging` anyway keep a module-level logger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["logger"]


def logger() -> logging.Logger:
    """The ``eventapi`` logger (the one every module of the package logs to)."""
    import logging

    return logging.getLogger("eventapi")
