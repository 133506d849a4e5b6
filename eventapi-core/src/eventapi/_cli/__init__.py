"""The ``eventapi`` command: ``backends``, ``check`` and ``trace``.

:mod:`._main` parses the command line and runs each subcommand; :mod:`._check` runs the checks
of ``eventapi check`` on a backend object and :mod:`._report` prints what they found. The
command is a user of the public API, not a part of it: nothing below imports this package.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
