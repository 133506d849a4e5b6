"""``python -m eventapi``: the same program as the ``eventapi`` command."""

from __future__ import annotations

from ._cli._main import main

if __name__ == "__main__":
    raise SystemExit(main())
