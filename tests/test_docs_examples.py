"""Every ``python`` block of the docs and the README runs as written, page by page.

The rule for fragments, which the docs' index states to readers: a block whose first line is
``# continues the block above`` runs after the blocks before it on its page, in their
namespace; any other block stands alone, so it must import what it uses, and it starts a fresh
namespace. A block that imports nothing and is not marked fails the rule, and so does a page
whose first block is marked (there is nothing above it to continue).

Each page's blocks run in order in one fresh interpreter, as a reader pasting them into a
session would, with ``EVENTAPI_BACKEND=host`` in a scratch working directory; a page whose
blocks select ``cuda`` or ``hip``, or import their bindings, runs with that emulated driver
preloaded. A failure names the page and the line in it, since each block is compiled under its
own line numbers.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import child
import pytest
from emulated_driver import DriverName, build, library_path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

CONTINUES = "# continues the block above"
"""The first line of a block that runs in the namespace of the blocks before it."""

WORK_NS = 2_000_000
"""getting-started's stand-in for work sleeps 2 ms (``launch_work``'s default); a window around
it reads at least that, less the host timer's resolution (1 us at most on Linux)."""

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_DRIVER = {
    "cuda": re.compile(r"""backend\(["']cuda|^\s*(from|import) cuda\b""", re.MULTILINE),
    "hip": re.compile(r"""backend\(["']hip|^\s*(from|import) hip\b""", re.MULTILINE),
}
_TORCH = re.compile(r"^\s*(from|import) torch\b", re.MULTILINE)

# Runs the blocks it is given; each compiled with its page and line numbers, and each that
# does not continue the one before in a namespace of its own.
_RUNNER = """
import json, sys
with open(sys.argv[1]) as file:
    blocks = json.load(file)
namespace = {}
for page, line, code, continues in blocks:
    if not continues:
        namespace = {"__name__": "__main__"}
    exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
"""


class Block(NamedTuple):
    """A fenced ``python`` block: its page, the page's line of its first line of code, its code."""

    page: str
    line: int
    code: str

    @property
    def continues(self) -> bool:
        return self.code.startswith(CONTINUES + "\n")


def python_blocks(text: str, page: str) -> list[Block]:
    """The fenced ``python`` blocks of the Markdown ``text`` of ``page``, in order."""
    return [
        Block(page, text.count("\n", 0, match.start(1)) + 1, match.group(1))
        for match in _FENCE.finditer(text)
    ]


def page_blocks(path: Path) -> list[Block]:
    return python_blocks(path.read_text(), str(path.relative_to(ROOT)))


def rule_errors(blocks: list[Block]) -> list[str]:
    """What in ``blocks`` (one page's) breaks the rule for fragments, one line each."""
    errors = []
    for index, block in enumerate(blocks):
        where = f"{block.page}:{block.line}"
        try:
            tree = ast.parse(block.code)
        except SyntaxError as exc:
            errors.append(f"{where}: not Python: {exc.msg}")
            continue
        imports = any(isinstance(node, ast.Import | ast.ImportFrom) for node in tree.body)
        if block.continues and index == 0:
            errors.append(
                f"{where}: the page's first python block continues nothing; "
                f"drop {CONTINUES!r} and import what it uses"
            )
        elif not block.continues and not imports:
            errors.append(
                f"{where}: a python block without imports must start with {CONTINUES!r} "
                "(it runs after the blocks above), or import what it uses"
            )
    return errors


def drivers(blocks: list[Block]) -> list[DriverName]:
    """The emulated drivers the blocks need: those of the backends they select or import."""
    code = "\n".join(block.code for block in blocks)
    names: list[DriverName] = ["cuda", "hip"]
    return [name for name in names if _DRIVER[name].search(code)]


def run_blocks(blocks: list[Block], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``blocks`` in a fresh interpreter in ``cwd``, on host and the drivers they need."""
    program = cwd / ".blocks.json"
    program.write_text(json.dumps([(*block, block.continues) for block in blocks]))
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVENTAPI_")}
    env["EVENTAPI_BACKEND"] = "host"
    env.pop("LD_PRELOAD", None)
    needed = drivers(blocks)
    if needed:
        build()
        env["LD_PRELOAD"] = " ".join(str(library_path(name)) for name in needed)
    return child.command([sys.executable, "-c", _RUNNER, program], cwd=cwd, env=env)


def check_getting_started(output: str, cwd: Path) -> None:
    lines = output.splitlines()
    assert lines[0] == "host"
    assert lines[1] == "reached: True"
    # The first window's span: name, duration_ns, start_ns, uncertainty_ns.
    name, duration_ns, _, _ = lines[2].split()
    assert name == "matmul"
    assert int(duration_ns) >= WORK_NS - 1_000, lines[2]
    # The summary, read after the profiler closed, counts the second window too.
    assert lines[3].startswith("Stats(count=2,"), lines[3]
    # The trace: ten steps, each around the stand-in's known work.
    trace = json.loads((cwd / "train.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    steps = [event for event in events if event.get("ph") == "X" and event["name"] == "step"]
    assert len(steps) == 10
    assert min(step["dur"] for step in steps) >= (WORK_NS - 1_000) / 1_000  # microseconds


def check_readme(output: str, cwd: Path) -> None:
    assert output.split(maxsplit=1)[0] == "matmul", output


# What a page's run must print or write, beyond running: pages that promise an output.
CHECKS: dict[str, Callable[[str, Path], None]] = {
    "docs/getting-started.md": check_getting_started,
    "README.md": check_readme,
}


# Pages whose blocks do not run as written, and why: their run must fail (a strict xfail), so
# the entry goes as soon as the page is fixed.
KNOWN_BROKEN: dict[str, str] = {}


def page_params() -> list[object]:
    params: list[object] = []
    for path in PAGES:
        blocks = page_blocks(path)
        if not blocks:
            continue
        page = str(path.relative_to(ROOT))
        marks: list[pytest.MarkDecorator] = []
        if any(_TORCH.search(block.code) for block in blocks):
            # The torch tier (docs/testing.md): `make test-torch` installs torch first.
            marks.append(pytest.mark.torch)
            marks.append(
                pytest.mark.skipif(
                    importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (pip install torch==2.13.0, the CPU build)",
                )
            )
        if page in KNOWN_BROKEN:
            marks.append(pytest.mark.xfail(reason=KNOWN_BROKEN[page], strict=True))
        params.append(pytest.param(page, marks=marks, id=page))
    return params


def test_every_python_block_follows_the_rule_for_fragments() -> None:
    errors = [error for path in PAGES for error in rule_errors(page_blocks(path))]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("page", page_params())
def test_the_page_runs_as_written(page: str, tmp_path: Path) -> None:
    blocks = page_blocks(ROOT / page)
    assert not rule_errors(blocks), "\n".join(rule_errors(blocks))
    done = run_blocks(blocks, tmp_path)
    assert done.returncode == 0, f"{page} exited {done.returncode}\n{done.stdout}{done.stderr}"
    check = CHECKS.get(page)
    if check is not None:
        check(done.stdout, tmp_path)


def test_the_pages_with_promised_output_have_blocks() -> None:
    for page in CHECKS:
        assert page_blocks(ROOT / page), f"{page}'s python blocks were not found"


# The mechanism itself, on pages made here: each check can fail.

BROKEN = f"""# A page

```python
import os

value = 1
```

Text between.

```python
{CONTINUES}
print(value)
print(undefined_name)
```
"""


def test_a_block_that_fails_fails_its_page_naming_the_page_and_line(tmp_path: Path) -> None:
    done = run_blocks(python_blocks(BROKEN, "docs/broken.md"), tmp_path)
    assert done.returncode != 0
    assert done.stdout == "1\n"  # the continuation saw the first block's name
    assert 'File "docs/broken.md", line 14' in done.stderr, done.stderr
    assert "undefined_name" in done.stderr, done.stderr


def test_a_block_that_is_not_marked_starts_a_fresh_namespace(tmp_path: Path) -> None:
    text = BROKEN.replace(CONTINUES, "import sys")
    blocks = python_blocks(text, "docs/alone.md")
    assert rule_errors(blocks) == []
    done = run_blocks(blocks, tmp_path)
    assert done.returncode != 0
    assert "NameError: name 'value' is not defined" in done.stderr, done.stderr


def test_the_rule_names_an_unmarked_fragment_and_a_first_block_that_continues() -> None:
    unmarked = BROKEN.replace(CONTINUES + "\n", "")
    assert rule_errors(python_blocks(unmarked, "docs/a.md")) == [
        f"docs/a.md:12: a python block without imports must start with {CONTINUES!r} "
        "(it runs after the blocks above), or import what it uses"
    ]
    first = BROKEN.replace("import os\n", CONTINUES + "\n")
    assert rule_errors(python_blocks(first, "docs/b.md")) == [
        f"docs/b.md:4: the page's first python block continues nothing; "
        f"drop {CONTINUES!r} and import what it uses"
    ]
    no_imports = BROKEN.replace("import os\n", "")
    assert rule_errors(python_blocks(no_imports, "docs/c.md")) == [
        f"docs/c.md:4: a python block without imports must start with {CONTINUES!r} "
        "(it runs after the blocks above), or import what it uses"
    ]


def test_a_page_runs_on_the_emulated_drivers_of_the_backends_it_selects_or_imports() -> None:
    def needs(code: str) -> list[DriverName]:
        return drivers(python_blocks(f"```python\n{code}\n```\n", "docs/x.md"))

    assert needs('api = eventapi.backend("cuda:1")') == ["cuda"]
    assert needs("from cuda.core import Device") == ["cuda"]
    assert needs('api = eventapi.backend("hip")') == ["hip"]
    assert needs("api = eventapi.backend()  # or cuda, hip") == []
