"""Where ``eventapi/__init__.py`` finds :func:`eventapi.register_backend` and its undoing.

They live in :mod:`eventapi._plugins._discovery`, which keeps the backends registered in code.
"""

from ._discovery import register_backend, unregister_backend

__all__ = ["register_backend", "unregister_backend"]
