"""Rules about where a kind of knowledge lives (issue 39 found each broken once). Read from the source
(AST, nothing runs), over gptcore/ and explorer/:

- torch's private hook records (`_forward_hooks`, `_forward_pre_hooks`, the global ones, ...) are read
  only in gptcore/model/hooks.py, behind `module_hooked` and `hooks_suspended`;
- a file is written then renamed into place only in gptcore/io/atomic.py (`atomic_path`,
  `atomic_write_bytes`): no `os.replace`, `os.rename`, `Path.replace` or `Path.rename` elsewhere;
- no class is recognised by its name (`type(x).__name__ == "TopKSAE"`): `isinstance`, or what it does.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gptcore", "explorer")
HOOKS_HOME = "gptcore/model/hooks.py"
ATOMIC_HOME = "gptcore/io/atomic.py"
TORCH_HOOK_RECORDS = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                      "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
                      "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks"}
RENAMES = {"replace", "rename"}


def _trees(root: Path = ROOT):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            yield path.relative_to(root).as_posix(), ast.parse(source, filename=str(path))


def hook_record_reads(root: Path = ROOT) -> list[str]:
    return [f"{name}:{node.lineno} .{node.attr}" for name, tree in _trees(root) if name != HOOKS_HOME
            for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in TORCH_HOOK_RECORDS]


def renames(root: Path = ROOT) -> list[str]:
    """Calls `x.replace(a)` / `x.rename(a)` with one argument (os's two-argument forms too), outside atomic.py.
    str.replace takes two arguments, so it is not one of them."""
    found = []
    for name, tree in _trees(root):
        if name == ATOMIC_HOME:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RENAMES):
                continue
            owner = node.func.value
            via_os = isinstance(owner, ast.Name) and owner.id == "os"
            if (via_os and len(node.args) == 2) or (not via_os and len(node.args) == 1 and not node.keywords):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def class_name_tests(root: Path = ROOT) -> list[str]:
    """`type(x).__name__` (or `x.__class__.__name__`) compared with ==, != or in."""
    found = []
    for name, tree in _trees(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "__name__" and isinstance(side.value, (ast.Call, ast.Attribute))
                    and (isinstance(side.value, ast.Attribute) and side.value.attr == "__class__"
                         or isinstance(side.value, ast.Call) and getattr(side.value.func, "id", "") == "type")
                    for side in [node.left, *node.comparators]):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_torchs_hook_records_are_read_only_in_hooks_py():
    assert hook_record_reads() == []


def test_files_are_renamed_into_place_only_in_atomic_py():
    assert renames() == []


def test_no_class_is_recognised_by_its_name():
    assert class_name_tests() == []


def test_the_scans_see_what_they_look_for(tmp_path):
    (tmp_path / "gptcore").mkdir()
    (tmp_path / "explorer").mkdir()
    (tmp_path / "gptcore" / "bad.py").write_text(
        "import os\n"
        "def f(m, tmp, path, lens):\n"
        "    if m._forward_hooks: pass\n"
        "    tmp.replace(path)\n"
        "    os.replace(tmp, path)\n"
        "    ok = 'a-b'.replace('-', '_')\n"
        "    return type(lens).__name__ == 'TopKSAE' or lens.__class__.__name__ in ('A',)\n", encoding="utf-8")
    assert hook_record_reads(tmp_path) == ["gptcore/bad.py:3 ._forward_hooks"]
    assert [r.split(" ", 1)[0] for r in renames(tmp_path)] == ["gptcore/bad.py:4", "gptcore/bad.py:5"]
    assert len(class_name_tests(tmp_path)) == 2
