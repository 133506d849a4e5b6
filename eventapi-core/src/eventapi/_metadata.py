"""An installed distribution's name and version, read cheaply from its metadata.

Discovery reads them for every plugin it lists, and a probe for its binding
(:func:`eventapi.driverkit.probe.installed_version`), in every process that lists backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = ["name_and_version", "version_of"]


def name_and_version(dist: Distribution) -> tuple[str, str]:
    """The distribution's ``Name`` and ``Version``, read from its metadata's header.

    ``dist.name`` and ``dist.version`` each parse the whole metadata file with the email
    package (imported for it: about 0.7 ms, then a parse per field); both fields are single
    header lines, so reading the header up to its first blank line finds them at a fraction of
    the cost. Falls back to importlib.metadata where the header lacks either.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the header ends at the first blank line
        if line[0].isspace():
            continue  # a continuation of the field before
        key, colon, value = line.partition(":")
        key = key.strip().lower()
        if colon and key in ("name", "version"):
            found.setdefault(key, value.strip())
    if "name" in found and "version" in found:
        return found["name"], found["version"]
    return dist.name, dist.version


def version_of(distribution: str) -> str | None:
    """The installed ``distribution``'s version, as its metadata says; None when not installed.

    ``eventapi.__version__`` is this for ``eventapi-core``: one version, the one pip installed,
    not a second copy in the source that could drift from it.
    """
    import importlib.metadata

    try:
        return name_and_version(importlib.metadata.distribution(distribution))[1]
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
