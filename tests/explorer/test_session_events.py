"""The session announces every change as a typed event; the window and the panels follow
those events by themselves (nobody broadcasts)."""
from __future__ import annotations

import dataclasses

import torch

from explorer.session.core import Session
from explorer.session.events import AblationChanged, ModelSwapped, SettingsChanged, TrainingStepShown

SMALL = dict(n_layer=2, n_head=2, n_embd=32, block_size=64)


def _recording(session):
    events = []
    session.events.subscribe(events.append)
    return events


def test_a_build_says_what_replaced_what():
    session = Session.tiny()
    events = _recording(session)
    info = session.build(SMALL, seed=0, name="two-layer")
    assert len(events) == 1 and isinstance(events[0], ModelSwapped)
    event = events[0]
    assert event.old.name == "tiny (test)" and event.new.name == "two-layer" == info.name
    assert event.version == session.version
    assert "tiny (test) → two-layer" in event.detail


def test_an_ablation_is_not_a_model_swap_and_says_what_changed():
    session = Session.tiny()
    events = _recording(session)
    session.interp.set_ablation([(0, 1), (1, 2)])
    session.interp.clear_ablation()
    assert [type(e) for e in events] == [AblationChanged, AblationChanged]
    assert events[0].after.heads == ((0, 1), (1, 2)) and not events[0].before.active
    assert events[0].reason == "out of date: the ablation changed (now 2 heads ablated)"
    assert events[1].reason == "out of date: the ablation was reset"
    assert events[1].version == session.version == events[0].version + 1


def test_a_setting_and_a_training_step_are_announced_with_a_fresh_version():
    session = Session.tiny()
    events = _recording(session)
    v = session.settings_changed("the tokenizer's BOS rule")
    moved = {k: t + 0.5 for k, t in session.model.state_dict().items()}
    w = session.show_training_step(moved, step=1200)
    assert isinstance(events[0], SettingsChanged) and events[0].version == v
    assert events[0].reason == "out of date: the tokenizer's BOS rule changed"
    assert isinstance(events[1], TrainingStepShown) and events[1].step == 1200 and w == v + 1
    assert "training step 1,200" in events[1].reason
    key = next(iter(moved))
    assert torch.equal(session.model.state_dict()[key], moved[key])  # the weights really moved


def test_a_training_step_writes_its_facts_after_its_weights_and_version():
    """Readers without the lock (a label, a test's wait) poll the name: once it names the new step,
    the weights and the version must already be the new step's (a test once saw the old version)."""
    session = Session.tiny()
    before = session.version
    moved = {k: t + 0.5 for k, t in session.model.state_dict().items()}
    key = next(iter(moved))
    seen = {}

    def facts(info):
        seen.update(version=session.version, moved=torch.equal(session.model.state_dict()[key], moved[key]))
        return dataclasses.replace(info, note="step 7's facts")

    version = session.show_training_step(moved, step=7, name="step 7", info=facts)
    assert seen == {"version": before + 1, "moved": True} and version == before + 1
    assert session.info.name == "step 7" and session.info.note == "step 7's facts"


def test_a_failing_listener_neither_undoes_the_change_nor_silences_the_others():
    session = Session.tiny()

    def broken(_event):
        raise RuntimeError("a broken view")

    session.events.subscribe(broken)
    events = _recording(session)
    session.interp.set_ablation([(0, 0)])
    assert session.interp.ablation.heads == ((0, 0),) and len(events) == 1


def test_unsubscribed_listeners_hear_nothing():
    session = Session.tiny()
    events = []
    stop = session.events.subscribe(events.append)
    stop()
    session.interp.set_ablation([(0, 0)])
    assert events == []


def test_the_window_follows_an_ablation_set_on_the_session_alone(qtbot, window):
    """No window method is called: the status bar and a built panel follow the event."""
    page = window.show_panel("attribution")
    qtbot.waitUntil(lambda: page.is_ready, timeout=30000)
    window.session.interp.set_ablation([(1, 3)])
    assert not window.status_bar.ablation_label.isHidden()
    assert window.status_bar.ablation_label.text().startswith("1 head ablated")
    assert page.view.ablation_label.text().startswith("1 head ablated")
    window.session.interp.clear_ablation()
    assert window.status_bar.ablation_label.isHidden()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)
