"""Small parts (issue 26): a module, a function and a class each stay small enough to read in one
sitting. Read from the source (AST, nothing runs):

- no .py file in gptcore/ or explorer/ over 400 lines;
- at most 3 functions over 60 lines in the whole project (gptcore/ and explorer/ together);
- no class with more than 30 methods.

The limits are DESIGN.md's; the test prints the offenders so a failure says where to split.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 3  # in the whole project
MAX_METHODS = 30

PACKAGES = ["gptcore", "explorer"]


def _modules(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        yield path.relative_to(ROOT).as_posix(), source, ast.parse(source, filename=str(path))


def long_files(package: str) -> list[str]:
    return [f"{name}: {n} lines" for name, source, _ in _modules(package)
            if (n := len(source.splitlines())) > MAX_FILE_LINES]


def long_functions(package: str) -> list[str]:
    found = []
    for name, _, tree in _modules(package):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    return found


def big_classes(package: str) -> list[str]:
    found = []
    for name, _, tree in _modules(package):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if n > MAX_METHODS:
                    found.append(f"{name} {node.name}: {n} methods")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_file_over_400_lines(package):
    assert long_files(package) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_class_over_30_methods(package):
    assert big_classes(package) == []


def test_gptcore_alone_stays_within_the_long_function_allowance():
    assert len(long_functions("gptcore")) <= MAX_LONG_FUNCTIONS, long_functions("gptcore")


def test_at_most_three_functions_over_60_lines_in_the_project():
    found = long_functions("gptcore") + long_functions("explorer")
    assert len(found) <= MAX_LONG_FUNCTIONS, "\n".join(found)


def test_the_scan_sees_what_it_measures(tmp_path, monkeypatch):
    """The counters would catch an offender: a 61-line function, a 401-line file, a 31-method class."""
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(["def long():"] + ["    x = 1"] * 60)
    methods = "\n".join(["class Big:"] + [f"    def m{i}(self):\n        pass" for i in range(31)])
    (package / "a.py").write_text(body + "\n" + methods + "\n" + "\n" * 400, encoding="utf-8")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert long_functions("pkg") == ["pkg/a.py:1 long: 61 lines"]
    assert big_classes("pkg") == ["pkg/a.py Big: 31 methods"]
    assert long_files("pkg") and long_files("pkg")[0].startswith("pkg/a.py: ")
