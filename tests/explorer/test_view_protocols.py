"""Views behind protocols (explorer/controllers/views.py): every view offers its protocol,
and every controller touches nothing of its view outside it (no child widgets)."""
from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

import pytest

from explorer.controllers.views import VIEW_PROTOCOLS

ROOT = Path(__file__).resolve().parents[2]
VIEW_NAMES = ("view", "panel")  # what controllers call their view (self.view, self.panel, a local `panel`)


def _members(protocol) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    names |= set(typing.get_type_hints(protocol))  # the signals and plain attributes
    return names


def _used_on_view(module: str) -> set[str]:
    tree = ast.parse((ROOT / "explorer" / "controllers" / f"{module}.py").read_text(encoding="utf-8"))
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        on_self = isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self" \
            and v.attr in VIEW_NAMES
        on_local = isinstance(v, ast.Name) and v.id in VIEW_NAMES
        if on_self or on_local:
            used.add(node.attr)
    return used


@pytest.mark.parametrize("module", sorted(VIEW_PROTOCOLS))
def test_controllers_use_only_what_their_view_protocol_declares(module):
    protocol = VIEW_PROTOCOLS[module]
    extra = _used_on_view(module) - _members(protocol)
    assert not extra, (f"controllers/{module}.py uses {sorted(extra)} of its view, which {protocol.__name__} "
                       f"(explorer/controllers/views.py) does not declare: add a getter/setter to the view and "
                       f"declare it, rather than reaching into its widgets")


@pytest.mark.parametrize("module", sorted(VIEW_PROTOCOLS))
def test_every_view_offers_its_whole_protocol(module):
    view_class = getattr(importlib.import_module(f"explorer.views.{module}.panel"), f"{module.capitalize()}Panel")
    missing = {m for m in _members(VIEW_PROTOCOLS[module]) if not hasattr(view_class, m)}
    assert not missing, f"{view_class.__name__} lacks {sorted(missing)} of {VIEW_PROTOCOLS[module].__name__}"
