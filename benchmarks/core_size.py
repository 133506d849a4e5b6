"""How big the core is: lines of code of ``eventapi-core/src/eventapi``, per part and in all.

The core is the package less ``eventapi.testing``, the conformance kit: a test suite that
backends run, not code a program runs. A line of code is one that holds part of a statement:
not blank, not only a comment, and not part of a docstring (a string standing as a statement:
the one that opens a module, class or function, or one after a constant, as Sphinx reads it).
``in all`` counts every line of the files. Counted with :mod:`tokenize` and :mod:`ast`, so a
statement over several lines counts each of its lines, as a reader sees them; the kit is
counted on a line of its own. On the tree before 0.2.0's trimming (``be7fcd8``) it prints
7,885 lines of code and 12,474 in all.

    python benchmarks/core_size.py [ROOT]      # ROOT defaults to eventapi-core/src/eventapi
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections import Counter
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "eventapi-core" / "src" / "eventapi"
KIT = "testing"  # the conformance kit, counted apart
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The lines of ``source`` that hold code, docstrings left out."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        # A string standing as a statement: a docstring, of a module, class or function or
        # (after an assignment, as Sphinx reads it) of a constant or attribute. It does nothing.
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            assert node.end_lineno is not None
            lines.difference_update(range(node.lineno, node.end_lineno + 1))
    return len(lines)


def measure(root: Path) -> tuple[Counter[str], int, int]:
    """Lines of code per top-level part of ``root``, their sum, and every line of the files."""
    parts: Counter[str] = Counter()
    everything = 0
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        relative = path.relative_to(root)
        part = relative.parts[0] if len(relative.parts) > 1 else relative.name
        parts[part] += code_lines(source)
        if part != KIT:
            everything += len(source.splitlines())
    return parts, sum(n for part, n in parts.items() if part != KIT), everything


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else CORE
    parts, code, everything = measure(root)
    for part, count in parts.most_common():
        if part != KIT:
            print(f"{count:6d}  {part}")
    print(f"{code:6d}  the core's lines of code (statements; not docstrings, comments or blanks)")
    print(f"{everything:6d}  the core's lines in all")
    print(f"{parts[KIT]:6d}  lines of code of eventapi.{KIT}, the conformance kit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
