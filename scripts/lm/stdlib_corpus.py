"""A small local English corpus for trying the LM pipeline offline: the docstrings of Python's standard
library, one JSONL document ({"text": ...}) per module, class or function docstring of at least 200
characters. Nothing is downloaded; the README's LM update-diagnostic example uses it.

    python scripts/lm/stdlib_corpus.py corpus.jsonl                  # this Python's standard library
    python scripts/lm/stdlib_corpus.py corpus.jsonl --root /path/to/lib/python3.11

Test suites and IDLE are skipped (test fixtures are not prose). Files are read in sorted path order,
so the same standard library always gives the same file.
"""

from __future__ import annotations

import argparse
import ast
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SKIPPED_PARTS = ("test", "tests", "idlelib", "site-packages", "dist-packages")
DOCSTRING_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(root: Path, min_chars: int) -> Iterator[str]:
    """Every docstring of at least `min_chars` characters under `root`, in path then tree order."""
    for path in sorted(root.rglob("*.py")):
        if any(part in path.parts for part in SKIPPED_PARTS):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a few stdlib files are deliberately broken or not UTF-8
        for node in ast.walk(tree):
            if isinstance(node, DOCSTRING_OWNERS):
                text = ast.get_docstring(node)
                if text and len(text) >= min_chars:
                    yield text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSONL file to write")
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--min-chars", type=int, default=200)
    args = parser.parse_args()
    count = chars = 0
    partial = args.out.with_name(args.out.name + ".partial")
    with partial.open("w", encoding="utf-8") as handle:
        for text in docstrings(args.root, args.min_chars):
            handle.write(json.dumps({"text": text}) + "\n")
            count, chars = count + 1, chars + len(text)
    partial.replace(args.out)
    print(f"{count} documents, {chars} characters from {args.root} -> {args.out}")


if __name__ == "__main__":
    main()
