"""One stale rule for every panel (issue 26): every background task a controller starts goes
through PanelController.submit / PanelContext.submit, which says what state its result is for;
nothing hands work to the runner past it."""
from __future__ import annotations

import ast
from pathlib import Path

from explorer.controllers.context import any_state

CONTROLLERS = Path(__file__).resolve().parents[2] / "explorer" / "controllers"
WAIT_MS = 20000


def _runner_submits(path: Path) -> list[str]:
    """'function:line' of every `<...>runner.submit(...)` call in a module."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(fn):
            f = node.func if isinstance(node, ast.Call) else None
            if (isinstance(f, ast.Attribute) and f.attr == "submit"
                    and (isinstance(f.value, ast.Attribute) and f.value.attr == "runner"
                         or isinstance(f.value, ast.Name) and f.value.id == "runner")):
                found.append(f"{getattr(fn, 'name', 'lambda')}:{node.lineno}")
    return sorted(set(found))


def test_no_controller_hands_a_task_to_the_runner_past_the_stale_rule():
    found = {p.name: _runner_submits(p) for p in sorted(CONTROLLERS.glob("*.py"))}
    found = {name: calls for name, calls in found.items() if calls}
    assert list(found) == ["context.py"] and [c.split(":")[0] for c in found["context.py"]] == ["submit"], found


def _settle(qtbot, runner) -> None:
    qtbot.waitUntil(lambda: not runner.busy, timeout=WAIT_MS)


def test_submit_drops_what_the_state_it_was_for_no_longer_holds(qtbot, panel_context, runner):
    """Default: this state (any version move drops it); model_now(): the same model (an ablation
    keeps it, a swap drops it); any_state: kept whatever happens."""
    ctx, session = panel_context, panel_context.session
    got = {}

    def submit_all(tag):
        """Three requests; their results reach the GUI thread only once it runs its event loop,
        so the state change below always comes first."""
        ctx.submit(f"{tag}-now", lambda t, p: tag, on_result=lambda r: got.setdefault(f"{tag}-now", r))
        ctx.submit(f"{tag}-model", lambda t, p: tag, still_current=ctx.model_now(),
                   on_result=lambda r: got.setdefault(f"{tag}-model", r))
        ctx.submit(f"{tag}-any", lambda t, p: tag, still_current=any_state,
                   on_result=lambda r: got.setdefault(f"{tag}-any", r))

    submit_all("ablated")
    session.interp.set_ablation([(0, 1)])  # the version moves on, the model stays
    _settle(qtbot, runner)
    assert got == {"ablated-model": "ablated", "ablated-any": "ablated"}

    got.clear()
    submit_all("kept")  # nothing moves: all three arrive
    _settle(qtbot, runner)
    assert got == {"kept-now": "kept", "kept-model": "kept", "kept-any": "kept"}
    got.clear()
    submit_all("swapped")
    session.build(session.config.to_dict(), "gpt2", seed=3)  # another model
    _settle(qtbot, runner)
    assert got == {"swapped-any": "swapped"}
