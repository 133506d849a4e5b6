"""Events shared by the hostile plugin and the test that drives it (imported by both)."""

from __future__ import annotations

import threading

ENTERED = threading.Event()
"""Set when the plugin starts to hang."""

RELEASE = threading.Event()
"""Set by the test to end the hang."""
