"""The path check of `make lint`: every file path named in a comment or a docstring exists.

    python -m tests.comment_paths [FILE ...]    # no FILE: every tracked *.py of the repository

Code says where related code lives ("the claim of messaging/outbound/dispatch.py", "see
docs/delivery.md"); a move that forgets one leaves a pointer to nothing. A path is a run of
`folder/…/name.ext` that starts at a top-level folder of the repository; `file.py:LINE` and
`file.py::name` forms are read as the file alone. Paths in ordinary strings are not checked: code
and tests build paths that need not exist.
"""

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "var")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(map(re.escape, TOP))})/[\w./-]*\w\.[A-Za-z]+)")


def python_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in tracked.stdout.split()]


def _docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                yield node.body[0].lineno, text


def _comments(source: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def missing_paths(path: Path) -> list[tuple[int, str]]:
    """(line, path) for each path named in `path`'s comments and docstrings that does not exist."""
    source = path.read_text(encoding="utf-8")
    texts = [*_comments(source), *_docstrings(ast.parse(source))]
    found = []
    for line, text in texts:
        for offset, named in ((text.count("\n", 0, m.start()), m.group(1)) for m in PATH.finditer(text)):
            if not (ROOT / named.rstrip(".")).exists():
                found.append((line + offset, named))
    return sorted(set(found))


def main(argv: list[str]) -> int:
    files = [Path(name).resolve() for name in argv] or python_files()
    problems = [(file, line, named) for file in files for line, named in missing_paths(file)]
    for file, line, named in problems:
        print(f"{file.relative_to(ROOT)}:{line}: names {named}, which does not exist", file=sys.stderr)
    if problems:
        return 1
    print(f"comment paths: {len(files)} Python files, every path named exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
