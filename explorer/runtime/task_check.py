"""What a background task holds: no Qt object may cross to the compute thread.

Why a check and not only care: a task's function runs on the compute thread and is let go
there or on the GUI thread depending on timing; a Qt object whose last reference dies on the
compute thread runs its destructor there, and that once deadlocked the suite (Qt's signal
lock against the GIL). A task must be plain data: a function of the session, ids, numbers
and arrays. `qt_objects_held(fn)` walks what a callable carries — the bound `self`, closure
cells, default arguments, a partial's arguments, and containers among them — and names every
Qt object it finds, so `TaskRunner.submit` can refuse (tests) or log (the app) at the moment
the mistake is made rather than when it deadlocks.
"""
from __future__ import annotations

import functools
import types

import shiboken6
from PySide6.QtCore import SignalInstance

_QT_BASE = (shiboken6.Shiboken.Object, SignalInstance)  # every PySide6 wrapper (QObject, QPixmap, …), a bound signal
_MAX_DEPTH = 6
_MAX_ITEMS = 64  # a container longer than this is data (token ids), not captured widgets


class TaskHoldsQtObject(TypeError):
    """A task submitted to the compute thread carries a Qt object (names where it is held)."""


def qt_objects_held(fn) -> list[str]:
    """Where `fn` holds a Qt object, as paths ("closure 'self' -> AttentionController"); [] if none."""
    found: list[str] = []
    _walk(fn, getattr(fn, "__qualname__", type(fn).__name__), 0, set(), found)
    return found


def _walk(obj, path: str, depth: int, seen: set[int], found: list[str]) -> None:
    if isinstance(obj, _QT_BASE):
        found.append(f"{path} -> {type(obj).__name__}")
        return
    if depth > _MAX_DEPTH or id(obj) in seen:
        return
    seen.add(id(obj))
    for name, child in _children(obj):
        _walk(child, f"{path}.{name}", depth + 1, seen, found)


def _children(obj):
    """What a callable or container carries (not the attributes of arbitrary objects)."""
    if isinstance(obj, types.MethodType):
        yield "__self__", obj.__self__
        yield "__func__", obj.__func__
    elif isinstance(obj, types.BuiltinMethodType) and obj.__self__ is not None \
            and not isinstance(obj.__self__, types.ModuleType):
        yield "__self__", obj.__self__
    elif isinstance(obj, functools.partial):
        yield "func", obj.func
        yield from ((f"args[{i}]", a) for i, a in enumerate(obj.args))
        yield from ((f"keywords[{k!r}]", v) for k, v in obj.keywords.items())
    elif isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield f"<closure {name!r}>", cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later)
                continue
        yield from ((f"<default {i}>", d) for i, d in enumerate(obj.__defaults__ or ()))
        yield from ((f"<default {k!r}>", d) for k, d in (obj.__kwdefaults__ or {}).items())
    elif isinstance(obj, (tuple, list, set, frozenset)) and len(obj) <= _MAX_ITEMS:
        yield from ((f"[{i}]", item) for i, item in enumerate(obj))
    elif isinstance(obj, dict) and len(obj) <= _MAX_ITEMS:
        yield from ((f"[{k!r}]", v) for k, v in obj.items())
