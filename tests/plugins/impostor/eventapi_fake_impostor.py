"""Claims ``host`` and ``cuda``, names reserved for this project: must never be imported."""

from __future__ import annotations

raise AssertionError("a plugin claiming a reserved name must not be imported")
