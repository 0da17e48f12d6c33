"""The warm compute thread with real work: a running generation serves a keystroke's
attention capture at its next token, and the capture equals one computed alone."""
from __future__ import annotations

import threading

import numpy as np


def test_generation_does_not_hold_a_keystroke_for_more_than_one_step(qtbot, runner, single_torch_thread):
    from explorer.session.core import Session

    session = Session.tiny(seed=5, block_size=512)
    produced, first, ran_at = [], threading.Event(), []
    settings = dict(max_new_tokens=400, temperature=0.0)

    def generate(cancel, progress):  # what GenerationController submits
        for token in session.generation.stream([1, 2, 3], settings, cancel):
            produced.append(token.token)
            first.set()
            progress(len(produced), settings["max_new_tokens"], "")
        return len(produced)

    results = []
    runner.submit("generation.run", generate, on_result=lambda n: results.append(("generated", n)))
    assert first.wait(10)
    submitted_at = len(produced)

    def capture(token, _progress):  # what AttentionController submits
        ran_at.append(len(produced))
        return session.attention.capture("a keystroke while generating", full_layers=(0,))

    runner.submit("attention", capture, on_result=lambda r: results.append(("attention", r)))
    qtbot.waitUntil(lambda: any(kind == "attention" for kind, _ in results), timeout=20000)
    assert ran_at[0] - submitted_at <= 1 and ran_at[0] < settings["max_new_tokens"]
    qtbot.waitUntil(lambda: any(kind == "generated" for kind, _ in results), timeout=60000)
    assert dict(results)["generated"] == settings["max_new_tokens"]  # the generation went on afterwards
    undisturbed = [t.token for t in session.generation.stream([1, 2, 3], settings)]
    assert produced == undisturbed  # the capture in between changed nothing in the generation

    alone = Session(session.model, session.info)
    alone.attention.prefix_reuse = False
    want = alone.attention.capture("a keystroke while generating", full_layers=(0,))
    got = dict(results)["attention"]
    np.testing.assert_allclose(got.thumbnails, want.thumbnails, atol=1e-5)
    np.testing.assert_allclose(got.full[0], want.full[0], atol=1e-5)


def test_residual_sweep_serves_a_keystroke_between_two_of_its_steps(qtbot, runner, single_torch_thread):
    """The residual controller's sweep reports progress per (scheme, seed) step; a capture
    submitted meanwhile runs at the next step, long before the sweep ends."""
    from explorer.session.core import Session

    session = Session.tiny(seed=6)
    steps, first, ran_at, results = [], threading.Event(), [], []

    def sweep(token, progress):  # what the residual controller submits, on a small config
        def report(done, total, message):
            steps.append(done)
            first.set()
            progress(done, total, message)

        return session.residual.norms(config=dict(n_layer=4), seeds=tuple(range(8)), batch=2, length=32,
                                      progress=report, cancel=token, with_model=False)

    runner.submit("residual", sweep, on_result=lambda r: results.append(("sweep", r)))
    assert first.wait(20)
    submitted_at = len(steps)
    runner.submit("attention", lambda t, p: ran_at.append(len(steps)) or session.attention.capture("typed meanwhile"),
                  on_result=lambda r: results.append(("attention", r)))
    qtbot.waitUntil(lambda: len(results) == 2, timeout=120000)
    total = steps[-1]
    assert [kind for kind, _ in results] == ["attention", "sweep"]  # the keystroke did not wait for the sweep
    assert ran_at[0] - submitted_at <= 1 and ran_at[0] < total
    assert dict(results)["attention"].text == "typed meanwhile"
