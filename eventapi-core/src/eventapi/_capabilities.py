"""Which optional capabilities a backend object has: decided per object, cheaply.

A backend object has an optional capability when its attribute of that name is callable:
``event_query`` for :class:`~eventapi.SupportsEventQuery`, ``stream_is_capturing`` for
:class:`~eventapi.SupportsCaptureCheck`. That is what ``isinstance`` answers for an ordinary
class, but it is asked of each object, so an object can switch a capability off for itself
(``self.event_query = None``) while another object of its class keeps it. ``isinstance``
itself is not used: against a runtime protocol it costs microseconds per call; it reuses a
class's answer on Python 3.11 (where an object's ``None`` does not count); and since 3.12 it
ignores what ``__getattr__`` provides, which a delegating backend relies on. Two attribute
reads cost a fraction of a microsecond.

Whether an object is a backend at all (``BACKEND`` and the protocol's methods) is checked once
per class: those are required, not switched per object.
"""

from __future__ import annotations

from ._protocol import PROTOCOL_METHODS

__all__ = ["capabilities_of"]

# Classes whose objects were seen to carry the whole protocol. Only grows, and only with
# classes, which live as long as their module does anyway.
_backend_classes: set[type] = set()


def capabilities_of(api: object, caller: str) -> tuple[bool, bool]:
    """``(has event_query, has stream_is_capturing)`` for the backend object ``api``.

    Raises :class:`TypeError` naming ``caller`` when ``api`` is not a backend object (it lacks
    ``BACKEND`` or one of the protocol's methods), saying what to pass instead. Thread-safe.
    """
    if type(api) not in _backend_classes:
        _require_backend(api, caller)
        _backend_classes.add(type(api))
    return (
        callable(getattr(api, "event_query", None)),
        callable(getattr(api, "stream_is_capturing", None)),
    )


def _require_backend(api: object, caller: str) -> None:
    missing = [name for name in ("BACKEND", *PROTOCOL_METHODS) if not _has(api, name)]
    if missing:
        raise TypeError(
            f"{caller} needs a backend object (one that satisfies eventapi.EventApi, such as "
            f"eventapi.backend() or eventapi.backend('host') returns), got "
            f"{type(api).__qualname__} {_short_repr(api)}, which lacks {', '.join(missing)}"
        )


def _has(api: object, name: str) -> bool:
    try:
        member = getattr(api, name)
    except Exception:  # a broken property or __getattr__ is as good as missing here
        return False
    return name == "BACKEND" or callable(member)


def _short_repr(api: object) -> str:
    try:
        text = repr(api)
    except Exception:
        return "(unprintable)"
    return text if len(text) <= 60 else text[:57] + "..."
