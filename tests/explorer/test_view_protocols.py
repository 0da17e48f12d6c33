"""Views behind protocols (explorer/views/<panel>/protocol.py, beside the view): every panel of the
registry has one, every view offers its protocol, every controller is typed against it
(`PanelController[AttentionView]`) and touches nothing of its view outside it: no child widgets, also
not through an alias (`v = self.view`, `form = self.view.form`)."""
from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

import pytest

from explorer.shell.registry import PANELS

ROOT = Path(__file__).resolve().parents[2]


def _protocols() -> dict:
    """Panel name -> the Protocol in explorer/views/<name>/protocol.py named like its view."""
    found = {}
    for spec in PANELS:
        module = importlib.import_module(f"explorer.views.{spec.name}.protocol")
        found[spec.name] = next(v for k, v in vars(module).items()
                                if k.endswith("View") and isinstance(v, type) and v.__module__ == module.__name__)
    return found


VIEW_PROTOCOLS = _protocols()
VIEW_NAMES = ("view", "panel")  # what a controller may call its view (self.view, the `view` parameter)
SIGNAL_USES = {"connect", "emit", "disconnect"}


def _members(protocol) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    names |= set(typing.get_type_hints(protocol))  # the signals and plain attributes
    return names


def _signals(protocol) -> set[str]:
    return set(typing.get_type_hints(protocol))


class _ViewUses(ast.NodeVisitor):
    """What a module does with its view. Aliases count: a name or `self.x` bound to the view is
    the view; one bound to `view.member` (not called) is that member, whose own attributes are
    then a reach into it."""

    def __init__(self, tree: ast.Module):
        self.view_names = set(VIEW_NAMES)  # local names bound to the view
        self.view_attrs = set(VIEW_NAMES)  # self.<attr> bound to the view
        self.member_names: dict[str, str] = {}  # local name -> the view member it holds
        self.member_attrs: dict[str, str] = {}  # self.<attr> -> the view member it holds
        self.used: set[str] = set()
        self.reached: set[tuple[str, str]] = set()  # (member, attribute of it)
        for _ in range(3):  # aliases of aliases settle in a pass or two
            self._bind(tree)
        self.visit(tree)

    def is_view(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.view_names
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr in self.view_attrs)

    def member_of(self, node) -> str | None:
        """The view member `node` stands for (`view.form`, or an alias of it), else None."""
        if isinstance(node, ast.Attribute) and self.is_view(node.value):
            return node.attr
        if isinstance(node, ast.Name):
            return self.member_names.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return self.member_attrs.get(node.attr)
        return None

    def _pairs(self, tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    yield target, node.value
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                yield node.target, node.value
            elif isinstance(node, (ast.For, ast.comprehension)):
                yield node.target, node.iter  # `for w in (view.a, view.b)`: w is each of them
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                yield node.optional_vars, node.context_expr

    def _bind(self, tree) -> None:
        for target, value in self._pairs(tree):
            targets = target.elts if isinstance(target, ast.Tuple) else [target]
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value] * len(targets)
            if len(values) != len(targets):
                continue
            for t, v in zip(targets, values):
                for item in (v.elts if isinstance(v, (ast.Tuple, ast.List)) else [v]):
                    self._bind_one(t, item)

    def _bind_one(self, target, value) -> None:
        on_self = isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        if not (isinstance(target, ast.Name) or on_self):
            return
        name = target.id if isinstance(target, ast.Name) else target.attr
        if self.is_view(value):
            (self.view_names if isinstance(target, ast.Name) else self.view_attrs).add(name)
        elif (member := self.member_of(value)) is not None:
            (self.member_names if isinstance(target, ast.Name) else self.member_attrs)[name] = member

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.is_view(node.value):
            self.used.add(node.attr)
        elif (member := self.member_of(node.value)) is not None:
            self.reached.add((member, node.attr))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Name) and f.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)):
            if self.is_view(node.args[0]):
                self.used.add(node.args[1].value)
            elif (member := self.member_of(node.args[0])) is not None:
                self.reached.add((member, node.args[1].value))
        self.generic_visit(node)


def _uses(source: str) -> _ViewUses:
    return _ViewUses(ast.parse(source))


def _module_uses(module: str) -> _ViewUses:
    """The controller module and its split-off halves (controllers/<module>_*.py, e.g. train_following)."""
    folder = ROOT / "explorer" / "controllers"
    paths = [folder / f"{module}.py", *sorted(folder.glob(f"{module}_*.py"))]
    return _uses("\n\n".join(p.read_text(encoding="utf-8") for p in paths))


def _outside(uses: _ViewUses, protocol) -> list[str]:
    signals = _signals(protocol)
    extra = sorted(uses.used - _members(protocol))
    extra += sorted(f"{m}.{a}" for m, a in uses.reached if not (m in signals and a in SIGNAL_USES))
    return extra


@pytest.mark.parametrize("module", sorted(VIEW_PROTOCOLS))
def test_controllers_use_only_what_their_view_protocol_declares(module):
    protocol = VIEW_PROTOCOLS[module]
    extra = _outside(_module_uses(module), protocol)
    assert not extra, (f"controllers/{module}.py uses {extra} of its view, which {protocol.__name__} "
                       f"(explorer/views/{module}/protocol.py) does not declare: add a getter/setter to the view and "
                       f"declare it, rather than reaching into its widgets")


@pytest.mark.qt  # imports the controllers
@pytest.mark.parametrize("module", sorted(VIEW_PROTOCOLS))
def test_every_controller_is_typed_against_its_view_protocol(module):
    """`class XController(PanelController[XView])`: the protocol is the controller's type for its view."""
    controllers = importlib.import_module(f"explorer.controllers.{module}")
    from explorer.controllers.base import PanelController

    classes = [c for c in vars(controllers).values()
               if isinstance(c, type) and issubclass(c, PanelController) and c.__module__ == controllers.__name__]
    assert classes, module
    for cls in classes:
        args = [typing.get_args(b) for b in getattr(cls, "__orig_bases__", ()) if typing.get_origin(b) is PanelController]
        assert args == [(VIEW_PROTOCOLS[module],)], f"{cls.__name__} is not PanelController[{VIEW_PROTOCOLS[module].__name__}]"


@pytest.mark.qt  # imports the views
@pytest.mark.parametrize("module", sorted(VIEW_PROTOCOLS))
def test_every_view_offers_its_whole_protocol(module):
    controller = next(spec for spec in PANELS if spec.name == module).controller_class()
    view_class = controller.view_class
    assert view_class.__module__.startswith(f"explorer.views.{module}."), view_class
    missing = {m for m in _members(VIEW_PROTOCOLS[module]) if not hasattr(view_class, m)}
    assert not missing, f"{view_class.__name__} lacks {sorted(missing)} of {VIEW_PROTOCOLS[module].__name__}"


def test_the_scan_sees_through_aliases():
    """The guard itself: each way of reaching past the protocol below is caught."""
    protocol = VIEW_PROTOCOLS["attention"]
    cases = {
        "def f(self):\n    form = self.view.form\n    form.setText('x')\n": "form",
        "def f(self):\n    v = self.view\n    v.grid.clear()\n": "grid",
        "def __init__(self, ctx, view):\n    self.panel = panel = view\n    panel.status_label.setText('')\n": "status_label",
        "def f(self):\n    self.form = self.view.form\n\ndef g(self):\n    self.form.hide()\n": "form",
        "def f(self):\n    getattr(self.view, 'grid').clear()\n": "grid",
        "def f(self):\n    self.view.promptChanged.connect(print)\n    self.view.prompt_text().strip()\n"
        "    self.view.promptChanged.blockSignals(True)\n": "promptChanged.blockSignals",
        "def f(self):\n    for w in (self.view.grid, self.view.zoom):\n        w.hide()\n": "grid",
    }
    for source, caught in cases.items():
        extra = _outside(_uses(source), protocol)
        assert any(caught in e for e in extra), (source, extra)
    clean = "def f(self):\n    v = self.view\n    v.promptChanged.connect(print)\n    v.set_status(v.prompt_text())\n"
    assert _outside(_uses(clean), protocol) == []
