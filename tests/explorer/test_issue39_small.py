"""Issue 39's smaller items, each where a user meets it: a clamp is announced as a clamp; switching
Neurons -> SAE goes back to the SAE's site; the Train panel's head census and sample follow the step
every panel shows; a window whose default size or saved place hangs below the screen keeps its
status bar on screen."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QRect

from explorer.session.events import AblationChanged
from explorer.session.results import AblationState

WAIT = 60_000


@pytest.mark.parametrize("before, after, said", [
    (AblationState(), AblationState(features=((421, 10.0),)), "feature 421 clamped at 10"),
    (AblationState(), AblationState(features=((421, 0.0),)), "feature 421 ablated"),
    (AblationState(features=((421, 10.0),)), AblationState(features=((421, 10.0), (7, 2.0))), "feature 7 clamped at 2"),
    (AblationState(features=((421, 10.0),)), AblationState(), "the feature edits were reset"),
    (AblationState(heads=((0, 1),)), AblationState(heads=((0, 1),), features=((3, 1.5),)), "feature 3 clamped at 1.5"),
    (AblationState(), AblationState(heads=((0, 1),)), "the ablation changed (now 1 head ablated)"),
    (AblationState(mlps=(0,)), AblationState(), "the ablation was reset"),
])
def test_a_feature_edit_is_announced_as_what_it_is(before, after, said):
    assert AblationChanged(before=before, after=after, version=2).detail == said


def test_a_clamp_in_the_features_panel_reads_as_a_clamp_on_the_other_panels(qtbot, window):
    session = window.session
    window.actions["panel_attention"].trigger()  # a panel that says what moved its results out of date
    from gptcore import neuron_dictionary

    session.interp.set_feature_edits(neuron_dictionary(session.model, 0), {5: 3.0}, "layer 0 MLP neurons")
    events = []
    session.events.subscribe(events.append)
    session.interp.set_feature_edits(neuron_dictionary(session.model, 0), {5: 3.0, 9: 0.0}, "layer 0 MLP neurons")
    assert events[-1].reason == "out of date: feature 9 ablated"


def test_switching_neurons_back_to_sae_asks_for_the_sae_site_not_the_neurons_mlp(qtbot):
    from explorer.views.features.source_form import SourceForm

    form = SourceForm()
    qtbot.addWidget(form)
    form.set_layers(2)
    form.set_source("sae", 1, "resid")  # an SAE on the residual stream was shown
    asked = []
    form.dictionaryRequested.connect(lambda *a: asked.append(a))
    form.neurons.click()  # the neurons' table: shown with their own site, the MLP
    form.set_source("neurons", 1, "mlp")
    form.sae.click()
    assert asked[-1] == ("sae", 1, "resid") and form.site.currentData() == "resid"
    form.site.setCurrentIndex(form.site.findData("mlp"))  # the user's own choice for the SAE is kept
    form.neurons.click()
    form.set_source("neurons", 1, "mlp")
    form.sae.click()
    assert asked[-1] == ("sae", 1, "mlp")


def test_the_head_census_and_sample_follow_the_step_shown(qtbot, window, tmp_path):
    from tests.explorer.test_train_panel import _fake_run

    root = tmp_path / "run"
    _fake_run(root)  # probes at 0, 10, 20 with samples "cab" and census rows that differ by step
    window.open_run(str(root))
    c = window.panel("train").controller
    qtbot.waitUntil(lambda: c.shown is not None and c.shown[2] == 20 and not window.runner.busy, timeout=WAIT)
    qtbot.waitUntil(lambda: c.view.charts.census_step() == 20, timeout=WAIT)
    c.view.choose_step(10)
    qtbot.waitUntil(lambda: window.session.info.run.step == 10 and c.view.charts.census_step() == 10, timeout=WAIT)
    assert c.view.sample_label.text().startswith("sample at step 10 ")
    c.view.choose_step(0)
    qtbot.waitUntil(lambda: c.view.charts.census_step() == 0, timeout=WAIT)
    assert c.view.sample_label.text().startswith("sample at step 0 ")
    c.view.charts.census_slider.setValue(2)  # the user's own census step stays until the step shown moves
    c.draw()
    assert c.view.charts.census_step() == 20


@pytest.mark.parametrize("saved", [QRect(0, 25, 1280, 820), QRect(0, 0, 1280, 820), QRect(300, 25, 1000, 790)])
def test_a_window_hanging_below_the_screen_keeps_its_status_bar_on_it(qtbot, window, saved):
    screen = QRect(0, 0, 1280, 800)
    window.setGeometry(saved)
    window.keep_on_screen(screen)
    frame = window.frameGeometry()
    assert screen.contains(frame), (frame, screen)
    bar = window.statusBar()
    assert screen.contains(QRect(bar.mapTo(window, bar.rect().topLeft()) + window.geometry().topLeft(), bar.size()))
    if saved.height() < 800:  # it fits: moved up, never shrunk
        assert window.geometry().size() == saved.size()
    else:  # taller than the screen: as tall as the screen
        assert frame.height() == 800
