"""The session core stays small and is called by its domains (issue 26): a pinned public surface,
no method that only forwards to a domain, one place that moves the version on."""
from __future__ import annotations

import ast
from pathlib import Path

from explorer.session import core
from explorer.session.core import Session

CORE_FILE = Path(core.__file__)
MAX_PUBLIC = 15
MAX_LINES = 300
DOMAINS = ("attention", "generation", "residual", "interp", "training", "routes")


def _public_names() -> list[str]:
    return sorted(name for name in vars(Session) if not name.startswith("_"))


def _methods(tree: ast.Module):
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    return [n for n in cls.body if isinstance(n, ast.FunctionDef)]


def _forwards_to(fn: ast.FunctionDef, attrs) -> bool:
    """A body that is one statement reading or calling `self.<domain>.<name>` is a forward."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1:
        return False
    for node in ast.walk(body[0]):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"
                and node.value.attr in attrs):
            return True
    return False


def test_the_core_is_small_with_a_pinned_public_surface():
    names = _public_names()
    assert len(names) <= MAX_PUBLIC, names
    assert len(CORE_FILE.read_text(encoding="utf-8").splitlines()) < MAX_LINES
    # The surface as it is today; a new name here is a decision (does it belong in a domain?).
    assert set(names) == {"device", "config", "has_model", "tokenizer", "require_model", "encode", "token_strings",
                          "check_token_ids", "load", "build", "adopt", "show_training_step", "settings_changed",
                          "bump_version", "tiny"}


def test_no_method_forwards_to_a_domain_and_callers_reach_the_domains_by_name(tiny_session):
    tree = ast.parse(CORE_FILE.read_text(encoding="utf-8"))
    forwards = [fn.name for fn in _methods(tree) if _forwards_to(fn, DOMAINS)]
    assert forwards == []
    # The domains are objects on the session, not methods of it (session.attention IS the domain).
    for name in ("attention", "generation", "residual", "interp"):
        domain = getattr(tiny_session, name)
        assert not callable(domain) and domain.core is tiny_session, name
    assert tiny_session.attention.capture("one two", thumb_size=4).tokens == ("one", " two")


def _version_writers(tree: ast.Module) -> list[str]:
    """Names of the functions (module level or methods) that assign to some `<x>.version`."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            if any(isinstance(t, ast.Attribute) and t.attr == "version" for t in targets):
                found.append(fn.name)
    return found


def test_every_version_bump_goes_through_the_one_core_method():
    """Nobody but Session.bump_version moves `version` on (a swap, an ablation, a setting, a step
    shown); __init__ only sets where it starts."""
    writers = {path.name: _version_writers(ast.parse(path.read_text(encoding="utf-8")))
               for path in sorted(CORE_FILE.parent.glob("*.py"))}
    assert {name: w for name, w in writers.items() if w} == {"core.py": ["__init__", "bump_version"]}


def test_bump_version_makes_kept_state_stale(tiny_session):
    s = tiny_session
    s.attention.capture("one two three", thumb_size=4)
    census = s.interp.census()
    assert s.attention.cache_bytes() > 0
    with s.lock:
        v = s.bump_version()
    assert v == s.version and s.attention.cache_bytes() == 0 and s.interp.census() is not census
