"""The documentation site fails its build on a broken reference, as `make docs` runs it.

`make docs` builds every page; here a scratch copy of the configuration builds one small page
holding a single broken reference of each kind the site uses (a page link, a section anchor, a
Python object in the API reference), with the flags of the Makefile, and the build must fail
naming it. The same page without the break builds, so the failure is the reference's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A test of the test support (the docs build's tooling): its own tier (docs/testing.md).
# What it checks does not depend on the interpreter.
pytestmark = [pytest.mark.support, pytest.mark.single_interpreter]

ROOT = Path(__file__).resolve().parent.parent
GOOD = """# Scratch

## A section

See [the section](#a-section) and {py:class}`eventapi.Thing`.

```{py:class} eventapi.Thing
```
"""
BREAKS = {
    "page": "See [gone](no-such-page.md).",
    "anchor": "See [gone](#no-such-section).",
    "python": "See {py:class}`eventapi.NoSuchThing`.",
}


def makefile_flags() -> list[str]:
    found = re.search(r"^SPHINXFLAGS := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found, "the Makefile defines SPHINXFLAGS for `make docs`"
    return found.group(1).split()


def build(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "docs"
    source.mkdir()
    shutil.copy(ROOT / "docs" / "conf.py", source / "conf.py")
    (source / "index.md").write_text(page)
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", *makefile_flags(), source, tmp_path / "out"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_makefile_builds_with_warnings_as_errors_and_checks_every_reference() -> None:
    assert {"-W", "-n"} <= set(makefile_flags())


def test_a_page_without_a_break_builds(tmp_path: Path) -> None:
    done = build(tmp_path, GOOD)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_a_broken_reference_fails_the_build(tmp_path: Path, kind: str) -> None:
    done = build(tmp_path, GOOD + "\n" + BREAKS[kind] + "\n")
    assert done.returncode != 0
    assert "index.md" in done.stderr, done.stderr
    assert "WARNING" in done.stderr, done.stderr
