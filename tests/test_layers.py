"""DESIGN.md's import arrows, enforced by reading every module's imports (AST, nothing runs).

- gptcore never imports Qt or the app;
- explorer/panels never import torch, gptcore or transformers (numpy in, intent signals out);
- explorer/session.py (and its devices.py) never imports Qt; explorer/results.py is numpy only;
- transformers / huggingface_hub are imported only inside functions (importing gptcore stays fast).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QT = ("PySide6", "pyqtgraph", "PyQt5", "PyQt6", "qtpy", "shiboken6")
RULES = [
    ("gptcore", QT + ("explorer",), "gptcore is pure PyTorch: no Qt, no app code"),
    ("explorer/panels", ("torch", "gptcore", "transformers", "huggingface_hub", "safetensors"),
     "panels are passive views: numpy in, intent signals out"),
    ("explorer/session.py", QT, "the session is headless: no Qt"),
    ("explorer/devices.py", QT, "the session's device and memory checks are headless: no Qt"),
    ("explorer/results.py", QT + ("torch", "gptcore", "transformers", "safetensors"),
     "results are numpy and plain values: panels and scripts read them without torch"),
]
LAZY_ONLY = ("transformers", "huggingface_hub")


def _python_files(place: str) -> list[Path]:
    target = ROOT / place
    if target.suffix == ".py":
        return [target] if target.is_file() else []
    return sorted(target.rglob("*.py"))


def _imports(tree: ast.AST):
    """(line, module, top_level) for every absolute import in the tree."""
    top = set(map(id, tree.body)) if isinstance(tree, ast.Module) else set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, id(node) in top


def _matches(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(root_rules=RULES) -> list[str]:
    found = []
    for place, forbidden, why in root_rules:
        for path in _python_files(place):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, module, _top in _imports(tree):
                if _matches(module, forbidden):
                    found.append(f"{path.relative_to(ROOT)}:{line}: imports {module} — {why}")
    for path in _python_files("gptcore") + _python_files("explorer"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module, top in _imports(tree):
            if top and _matches(module, LAZY_ONLY):
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {module} at module level — import it "
                             f"inside the function that needs it")
    return found


def test_import_arrows_of_design_md_hold():
    assert violations() == []


def test_the_checker_sees_a_forbidden_import(tmp_path):
    """The scan must catch what it is there to catch (a panel importing torch inside a function)."""
    bad = tmp_path / "explorer" / "panels" / "bad_panel.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    import torch.nn\n    from gptcore.model import GPT\n", encoding="utf-8")
    global ROOT
    saved = ROOT
    ROOT = tmp_path
    try:
        found = violations()
    finally:
        ROOT = saved
    assert any("bad_panel.py:2: imports torch.nn" in f for f in found)
    assert any("bad_panel.py:3: imports gptcore.model" in f for f in found)


@pytest.mark.parametrize("place", ["gptcore", "explorer/panels", "explorer/session.py", "explorer/devices.py",
                                   "explorer/results.py"])
def test_each_ruled_place_exists(place):
    assert _python_files(place), f"{place} has no Python files: the rule would pass vacuously"
