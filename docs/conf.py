"""Sphinx configuration of the eventapi documentation site.

The pages stay Markdown (MyST), readable on a forge as they are; the API reference is generated
by autodoc from the docstrings of the installed distributions, so it cannot drift from the code.
``make docs`` builds with warnings as errors and nitpicky references: a broken link, a missing
page or a reference that no longer resolves fails the build.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from sphinx.ext import napoleon

ROOT = Path(__file__).resolve().parent.parent

project = "eventapi"
author = "the eventapi authors"
copyright = "the eventapi authors"
release = importlib.metadata.version("eventapi-core")
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
# The reference page of eventapi.trace joins the site once the module exists (_api_pages adds
# it to the API index); until then the page stays out of the build.
HAS_TRACE = importlib.util.find_spec("eventapi.trace") is not None
if not HAS_TRACE:
    exclude_patterns.append("api/trace.md")

# Headings get anchors, as on a forge, so `page.md#a-section` links resolve.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

nitpicky = True
# Names autodoc meets in signatures that no inventory here documents: the type variables of
# the generic protocols and the handle types of the driver bindings.
nitpick_ignore_regex = [
    # The type variables of the generic protocols and of driverkit (E, S, RE, RS, ...).
    (r"py:.*", r"(eventapi(_cuda|_hip)?\.)?(.*\.)?_?[A-Z][A-Za-z]?_?(co|contra)?"),
    # Private modules and classes that signatures and docstrings name: not documented, by intent.
    (r"py:.*", r"eventapi(_cuda|_hip)?(\.[A-Za-z_]+)*\._[A-Za-z_.]+"),
    # The driver bindings' own types.
    (r"py:.*", r"(cuda|hip|pyopencl)(\..*)?"),
    # The standard library: the build runs offline, so there is no inventory of Python's docs
    # to link to (intersphinx would fetch one).
    (
        r"py:.*",
        r"(abc|asyncio|collections|concurrent|contextlib|ctypes|logging|os|sys|threading|time"
        r"|types|typing|weakref)(\..*)?",
    ),
    (r"py:.*", r"_?pytest(\..*)?"),  # the kit's fixtures take pytest's request object
]
nitpick_ignore = [
    ("py:class", "Describe"),  # a type alias of the driver-call helpers, private to them
    ("py:data", "DEFAULT_PLUGIN_TIMEOUT"),  # discovery's default; the guide states its value
    ("py:data", "BLOCK_WINDOW_S"),  # the kit's blocking window; its docstring states the value
    ("py:data", "SPIN_NS"),  # the driver-call helpers' query spin; the docstring states it
    ("py:data", "IN_TURN_S"),  # discovery's in-turn window; the guide states its value
    ("py:data", "BATCH"),  # bench's readout batch; the docstring states its size
    ("py:class", "BenchResult"),  # what bench returns: received, never built (its page says)
    ("py:class", "PathLike"),  # eventapi.trace's alias for str | os.PathLike[str]
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"eventapi {release}"


def _changelog(app: Any, docname: str, source: list[str]) -> None:
    """The changelog page is the repository's CHANGELOG.md, once there is one."""
    if docname != "changelog":
        return
    changelog = ROOT / "CHANGELOG.md"
    if changelog.is_file():
        # Its links are written from the repository's root, where it is read on its own.
        source[0] = changelog.read_text().replace("](docs/", "](")


# Guides written alongside this site, listed after the profiling guide once their page exists.
LATER_GUIDES = [name for name in ("traces", "bench") if (ROOT / "docs" / f"{name}.md").is_file()]


def _api_pages(app: Any, docname: str, source: list[str]) -> None:
    """The indexes list the trace reference and the later guides once they exist."""
    if docname == "api/index" and HAS_TRACE:
        source[0] = source[0].replace("\ntesting\n", "\ntesting\ntrace\n", 1)
    if docname == "index" and LATER_GUIDES:
        guides = "".join(f"{name}\n" for name in LATER_GUIDES)
        source[0] = source[0].replace("\nprofiling\n", f"\nprofiling\n{guides}", 1)


def _google_sections_only(app: Any, what: str, *args: Any) -> None:
    """Napoleon for what has ``Raises:`` or ``Args:`` sections, not for attributes.

    Napoleon reads the first line of a property's docstring as ``type: description`` when it
    holds a colon, which turns a sentence into a type; properties here are plain prose.
    """
    if what not in {"attribute", "property", "data"}:
        napoleon._process_docstring(app, what, *args)


def _no_private_parameters(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, *rest: Any
) -> tuple[str, str | None] | None:
    """A class whose constructor takes only private parameters is shown as ``Class()``.

    ``EventFence.__init__`` takes the token ``record`` passes (and refuses anything else); a
    reader is to build a fence with ``record``, not to see the token.
    """
    if what == "class" and signature is not None and signature.startswith("(_"):
        return "()", rest[0] if rest else None
    return None


def setup(app: Any) -> None:
    app.connect("autodoc-process-signature", _no_private_parameters)
    app.connect("source-read", _changelog)
    app.connect("source-read", _api_pages)
    app.setup_extension("sphinx.ext.napoleon")
    listeners = app.events.listeners["autodoc-process-docstring"]
    for index, listener in enumerate(listeners):
        if listener.handler is napoleon._process_docstring:
            listeners[index] = listener._replace(handler=_google_sections_only)
