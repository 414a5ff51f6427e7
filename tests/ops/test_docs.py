"""The documentation renders as written, its links lead somewhere, and it names every setting."""

import ast
import re
from pathlib import Path

import pytest

from tests.docs_check import check, markdown_files
from tests.harness import ROOT

CONFIGURATION = ROOT / "docs" / "configuration.md"
# The old README's mistake: a closing fence with the next paragraph on its line. GitHub reads the
# line as code, the fence runs on to the next one, and the heading below renders as code.
BROKEN_FENCE = """# mailservice

```sh
createdb -h 127.0.0.1 -U postgres mailservice
``` The sweeper re-queues messages due for a retry and sends no
worker picked up.

### DKIM

```
<selector>._domainkey.<domain>  TXT  "v=DKIM1; k=rsa; p=<public key>"
```
"""


def test_every_markdown_file_of_the_repository_passes_the_docs_check():
    files = markdown_files()
    assert [str(problem) for problem in check(files)] == []
    assert {ROOT / "README.md", CONFIGURATION, ROOT / "clients" / "js" / "README.md"} <= set(files)


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:40])
    assert "make run" in first_screen and "make test" in first_screen


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        pytest.param(BROKEN_FENCE, 5, "text after a closing fence", id="old-readme-fence"),
        pytest.param("Intro\n\n```sh\nmake run\n\n## Never closed\n", 3, "never closed", id="unclosed"),
        pytest.param("See [the API](docs/nowhere.md).\n", 1, "file that does not exist", id="missing-file"),
        pytest.param("# Title\n\nSee\n[below](#nowhere).\n", 4, "heading that does not exist", id="missing-anchor"),
    ],
)
def test_the_docs_check_names_file_and_line_of_each_mistake(tmp_path: Path, text: str, line: int, message: str):
    sample = tmp_path / "sample.md"
    sample.write_text(text)
    problems = check([sample])
    assert problems, "the check passed a broken document"
    assert (problems[0].path, problems[0].line) == (sample, line)
    assert message in problems[0].message


def test_a_correct_document_passes(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other\n\n## Domains' DNS records\n")
    sample = tmp_path / "sample.md"
    fixed = BROKEN_FENCE.replace("``` The sweeper", "```\n\nThe sweeper")
    sample.write_text(fixed + "\n[x](other.md#domains-dns-records)\n")
    assert check([sample]) == []


def _name_read(node: ast.AST) -> str | None:
    """The literal name an `env_*("NAME", …)`, `os.environ.get("NAME")`, `os.getenv("NAME")` or
    `os.environ["NAME"]` reads; None for any other node."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        function = ast.unparse(node.func)
        reads = function.startswith("env_") or function in {"os.environ.get", "os.getenv"}
        value = node.args[0].value if reads else None
    elif (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and ast.unparse(node.value) == "os.environ"
    ):
        value = node.slice.value
    else:
        value = None
    return value if isinstance(value, str) else None


def environment_variables_read() -> dict[str, str]:
    """Each name `config/` reads from the environment, with the file reading it."""
    names: dict[str, str] = {}
    for path in sorted((ROOT / "config").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            name = _name_read(node)
            if name:
                names.setdefault(name, path.name)
    return names


def documented_variables() -> set[str]:
    """The backquoted names in the first column of the configuration table."""
    documented: set[str] = set()
    for row in CONFIGURATION.read_text().splitlines():
        cells = row.split("|")
        if row.startswith("|") and len(cells) > 2:
            documented.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[1]))
    return documented


def test_every_environment_variable_the_settings_read_is_documented():
    read = environment_variables_read()
    assert {"SECRET_KEY", "DATABASE_URL", "WEB_THREADS"} <= set(read), "the walk no longer finds the settings"
    undocumented = sorted(f"{name} ({where})" for name, where in read.items() if name not in documented_variables())
    assert undocumented == [], f"not in docs/configuration.md: {', '.join(undocumented)}"


# --- the commands the documents show -------------------------------------------------------------
_MANAGE = re.compile(r"\.venv/bin/python manage\.py ([a-z_]+)((?: [^`|#\n]*)?)")
_MAKE = re.compile(r"(?:^|`|\$ )make ([a-z][a-z-]*)")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")


def _documents() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    }


def test_every_manage_py_command_the_docs_show_exists_with_the_options_shown():
    """`.venv/bin/python manage.py NAME --option …` in any document: NAME is a command of this project (or of
    Django and its apps), and each `--option` written after it is one that command takes."""
    from django.core.management import get_commands, load_command_class

    commands = get_commands()
    wrong = []
    for document, text in _documents().items():
        for name, rest in _MANAGE.findall(text):
            if name not in commands:
                wrong.append(f"{document}: manage.py {name}: no such command")
                continue
            parser = load_command_class(commands[name], name).create_parser("manage.py", name)
            known = {option for action in parser._actions for option in action.option_strings}
            wrong += [
                f"{document}: manage.py {name} {option}: no such option"
                for option in _OPTION.findall(rest)
                if option not in known
            ]
    assert wrong == []


def test_every_make_target_the_docs_show_exists():
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    shown = {(document, target) for document, text in _documents().items() for target in _MAKE.findall(text)}
    assert sorted(f"{document}: make {target}" for document, target in shown if target not in targets) == []
