"""The docs check of `make lint`: every Markdown file of the repository renders as written.

    python -m tests.docs_check [FILE ...]    # no FILE: every *.md of the repository

It fails, naming file and line, on a code fence that is opened and never closed, on text right
after a closing fence on its line (GitHub then reads the line as content and the fence runs on,
turning the rest of the file into alternating code and prose), and on a relative link or image to
a file, or to a heading of a Markdown file, that does not exist. It uses markdown-it-py, GitHub's
reading of CommonMark, rather than patterns of its own.
"""

import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parent.parent
# Installed or generated trees: not the repository's documents.
SKIPPED_DIRS = {".git", ".venv", "node_modules", "var"}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}: {self.message}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []

    def walk(directory: Path) -> None:
        for entry in sorted(directory.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                if entry.name not in SKIPPED_DIRS and not entry.name.startswith("."):
                    walk(entry)
            elif entry.suffix == ".md":
                found.append(entry)

    walk(root)
    return found


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def _after_closing(line: str, marker: str) -> str | None:
    """What follows a fence of `marker`'s character at least as long on `line` (None: no such fence)."""
    match = FENCE.match(line)
    if match is None or match.group(1)[0] != marker[0] or len(match.group(1)) < len(marker):
        return None
    return match.group(2).strip()


def fence_problems(path: Path, lines: list[str], tokens: list[Token]) -> Iterator[Problem]:
    """A fence token runs from its opening line to its closing one, or to the end of its container
    when no line closes it. Inside it, a line of the fence's character at least as long as the
    opening, followed by text, is the mistake that made it run on."""
    for token in tokens:
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        opening = FENCE.match(lines[start])
        if opening is None:  # an indented fence in a list item or quote: markdown-it has checked it
            continue
        marker = opening.group(1)
        for number in range(start + 1, end):
            after = _after_closing(lines[number], marker)
            if after:
                yield Problem(path, number + 1, f"text after a closing fence: {lines[number].strip()[:60]!r}")
                break
        if end - 1 <= start or _after_closing(lines[end - 1], marker) != "":
            yield Problem(path, start + 1, f"fence {marker!r} opened here is never closed")


def heading_anchors(tokens: list[Token]) -> set[str]:
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats."""
    anchors: set[str] = set()
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        children = tokens[index + 1].children or []
        text = "".join(child.content for child in children if child.type in {"text", "code_inline"})
        slug = "".join(
            char for char in text.lower() if char in " -_" or unicodedata.category(char)[0] in {"L", "N", "M"}
        ).replace(" ", "-")
        candidate, repeat = slug, 0
        while candidate in anchors:
            repeat += 1
            candidate = f"{slug}-{repeat}"
        anchors.add(candidate)
    return anchors


def _links(tokens: list[Token]) -> Iterator[tuple[Token, str]]:
    for token in tokens:
        if token.type == "inline" and token.map is not None:
            for child in token.children or []:
                if child.type == "link_open":
                    yield token, str(child.attrs.get("href", ""))
                elif child.type == "image":
                    yield token, str(child.attrs.get("src", ""))


def _line_of(target: str, lines: list[str], block: Token) -> int:
    assert block.map is not None
    start, end = block.map
    for number in range(start, end):
        if target in lines[number]:
            return number + 1
    return start + 1


class Checker:
    def __init__(self) -> None:
        self.md = _parser()
        self._anchors: dict[Path, set[str]] = {}

    def anchors_of(self, path: Path) -> set[str]:
        if path not in self._anchors:
            self._anchors[path] = heading_anchors(self.md.parse(path.read_text(encoding="utf-8")))
        return self._anchors[path]

    def check(self, path: Path) -> list[Problem]:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() or [""]
        tokens = self.md.parse(text)
        self._anchors[path] = heading_anchors(tokens)
        problems = list(fence_problems(path, lines, tokens))
        for block, href in _links(tokens):
            problem = self.link_problem(path, href)
            if problem:
                problems.append(Problem(path, _line_of(href, lines, block), problem))
        return problems

    def link_problem(self, path: Path, href: str) -> str | None:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith("/"):
            return None  # another site, or a path of the running service (/admin/, /docs/)
        target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not target.exists():
            return f"link to a file that does not exist: {href}"
        if parts.fragment and target.suffix == ".md" and unquote(parts.fragment) not in self.anchors_of(target):
            return f"link to a heading that does not exist: {href}"
        return None


def check(paths: Iterable[Path]) -> list[Problem]:
    checker = Checker()
    return [problem for path in paths for problem in checker.check(path)]


def main(argv: list[str]) -> int:
    paths = [Path(arg).resolve() for arg in argv] or markdown_files()
    problems = check(paths)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"docs check: {len(problems)} problem(s) in {len(paths)} Markdown files", file=sys.stderr)
        return 1
    print(f"docs check: {len(paths)} Markdown files, no problems")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
