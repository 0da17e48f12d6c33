"""DESIGN.md's import arrows and the no-cycle rule, enforced by reading every module's imports
(AST, nothing runs).

- gptcore never imports Qt or the app;
- explorer/views and explorer/widgets never import torch, gptcore, transformers, the session, the runtime,
  the controllers or the shell (numpy in, intent signals out);
- explorer/session/ (and runtime/devices.py) never imports Qt; every explorer/session/**/results.py is numpy
  only (the shared one at the top and each domain's own, which may import the shared one);
- transformers / huggingface_hub are imported only inside functions (importing gptcore stays fast);
- no import cycle inside gptcore/ and explorer/.

Relative imports are resolved (`from ..session import X` in a panel is an import of
explorer.session.core), lazy imports inside functions count, and imports under `if TYPE_CHECKING:`
don't (they never run).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gptcore", "explorer")
QT = ("PySide6", "pyqtgraph", "PyQt5", "PyQt6", "qtpy", "shiboken6")
PASSIVE = ("torch", "gptcore", "transformers", "huggingface_hub", "safetensors", "explorer.session",
           "explorer.runtime", "explorer.controllers", "explorer.shell")
RULES = [
    ("gptcore", QT + ("explorer",), "gptcore is pure PyTorch: no Qt, no app code"),
    ("explorer/views", PASSIVE, "views are passive: numpy in, intent signals out"),
    ("explorer/widgets", PASSIVE, "shared widgets are passive: numpy in, intent signals out"),
    ("explorer/session", QT, "the session is headless: no Qt"),
    ("explorer/runtime/devices.py", QT, "the session's device and memory checks are headless: no Qt"),
    ("explorer/session/**/results.py", QT + ("torch", "gptcore", "transformers", "safetensors"),
     "results are numpy and plain values: views and scripts read them without torch"),
]
LAZY_ONLY = ("transformers", "huggingface_hub")


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # absolute, relative imports resolved
    top_level: bool  # at module level (not inside a function, class body or try in a function)


def _python_files(root: Path, place: str) -> list[Path]:
    if "*" in place:  # a glob: every results.py of the session, the domains' own included
        return sorted(root.glob(place))
    target = root / place
    if target.suffix == ".py":
        return [target] if target.is_file() else []
    return sorted(target.rglob("*.py"))


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _under_type_checking(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def read_imports(root: Path, path: Path) -> list[Import]:
    """Every import that can run, with `from . import x` counted as the submodule x when it exists."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    top = set(map(id, tree.body))
    here = module_name(root, path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _under_type_checking(node, parents):
            continue
        at_top = id(node) in top
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name, at_top) for alias in node.names]
            continue
        if node.level:
            if node.level - 1 > len(package):
                raise ValueError(f"{path}:{node.lineno}: relative import beyond the top package")
            base = package[: len(package) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        found.append(Import(node.lineno, stem, at_top))
        for alias in node.names:  # `from pkg import submodule` imports the submodule too
            candidate = f"{stem}.{alias.name}"
            if _module_path(root, candidate) is not None:
                found.append(Import(node.lineno, candidate, at_top))
    return found


def _module_path(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _matches(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for place, forbidden, why in RULES:
        for path in _python_files(root, place):
            for imp in read_imports(root, path):
                if _matches(imp.module, forbidden):
                    found.append(f"{path.relative_to(root)}:{imp.line}: imports {imp.module} — {why}")
    for package in PACKAGES:
        for path in _python_files(root, package):
            for imp in read_imports(root, path):
                if imp.top_level and _matches(imp.module, LAZY_ONLY):
                    found.append(f"{path.relative_to(root)}:{imp.line}: imports {imp.module} at module level — "
                                 f"import it inside the function that needs it")
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of our packages it imports (edges to modules that exist as files)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in _python_files(root, package):
            name = module_name(root, path)
            targets = {imp.module for imp in read_imports(root, path)
                       if _matches(imp.module, PACKAGES) and _module_path(root, imp.module) is not None}
            graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_import_arrows_of_design_md_hold():
    assert violations() == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_the_checker_sees_a_forbidden_import(tmp_path):
    """The scan must catch what it is there to catch (a panel importing torch inside a function)."""
    root = _plant(tmp_path, {"explorer/__init__.py": "", "explorer/views/__init__.py": "",
                             "explorer/views/bad_panel.py":
                                 "def f():\n    import torch.nn\n    from gptcore.model.gpt import GPT\n"})
    found = violations(root)
    assert any("bad_panel.py:2: imports torch.nn" in f for f in found)
    assert any("bad_panel.py:3: imports gptcore.model.gpt" in f for f in found)


def test_the_checker_resolves_relative_imports_across_a_layer(tmp_path):
    root = _plant(tmp_path, {"explorer/__init__.py": "", "explorer/session/__init__.py": "",
                             "explorer/session/core.py": "",
                             "explorer/widgets/__init__.py": "",
                             "explorer/widgets/sneaky.py": "from ..session.core import Session\nfrom ..session import core\n"})
    found = violations(root)
    assert any("sneaky.py:1: imports explorer.session.core" in f for f in found)
    assert any("sneaky.py:2: imports explorer.session.core" in f for f in found)


def test_the_checker_finds_a_planted_cycle_lazy_imports_included(tmp_path):
    root = _plant(tmp_path, {
        "explorer/__init__.py": "",
        "explorer/a.py": "from .b import thing\n",
        "explorer/b.py": "def thing():\n    from explorer import a  # lazy: still a cycle\n",
        "explorer/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
        "gptcore/__init__.py": "",
    })
    assert cycles(import_graph(root)) == [["explorer.a", "explorer.b"]]  # c's TYPE_CHECKING import is no edge


@pytest.mark.parametrize("place", ["gptcore", "explorer/views", "explorer/widgets", "explorer/session",
                                   "explorer/runtime/devices.py", "explorer/session/**/results.py"])
def test_each_ruled_place_exists(place):
    assert _python_files(ROOT, place), f"{place} has no Python files: the rule would pass vacuously"


def test_the_checker_holds_a_domains_own_results_to_numpy(tmp_path):
    """A domain's results.py in its own subpackage is held to numpy like the shared one."""
    root = _plant(tmp_path, {"explorer/__init__.py": "", "explorer/session/__init__.py": "",
                             "explorer/session/circuits/__init__.py": "",
                             "explorer/session/circuits/results.py": "import numpy as np\nimport torch\n"})
    found = violations(root)
    assert any("circuits/results.py:2: imports torch" in f for f in found)
