"""The Features panel's view alone (issue 33): fake numpy data in through its setters, the user's
intent out through its signals, offscreen. No model, no session, no controller."""
from __future__ import annotations

import typing

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from explorer.views.features.contexts import contexts_html, shade
from explorer.views.features.panel import FeaturesPanel
from explorer.views.features.protocol import FeaturesView

VOWELS = "aeiou"


def _contexts(n: int = 3) -> list:
    text = "the cat sat on the mat\nand <b> ate"
    out = []
    for c in range(n):
        tokens = list(text[c:c + 20])
        acts = np.array([2.0 + c if t in VOWELS else 0.0 for t in tokens])
        out.append((tokens, acts))
    return out


def _table(panel: FeaturesPanel, n: int = 12) -> None:
    ids = np.arange(n)
    density = np.linspace(0.001, 0.2, n)[::-1].copy()  # feature 0 the densest
    max_act = np.arange(n, dtype=float)  # max act = id: 10 must sort after 9
    logit = np.where(ids == 3, np.nan, ids * 0.1)
    panel.set_table(ids, density, max_act, logit, [f"tok{i}" for i in ids])


def _feature(panel: FeaturesPanel, feature: int = 5) -> None:
    edges = np.linspace(0.0, 4.0, 5)
    panel.set_feature(feature, f"<b>Feature {feature}</b>", _contexts(), edges, np.array([40, 10, 3, 0]),
                      [(" the", 2.5), ("\n", 1.0)], [("z", -1.5)])


@pytest.fixture
def panel(qtbot) -> FeaturesPanel:
    p = FeaturesPanel()
    qtbot.addWidget(p)
    p.set_layers(4)
    p.resize(1400, 900)
    p.show()
    QApplication.processEvents()
    return p


def _shown_ids(panel: FeaturesPanel) -> list[int]:
    model = panel.table.model
    return [int(model.data(model.index(r, 0))) for r in range(model.rowCount())]


def _click_header(qtbot, panel: FeaturesPanel, column: int) -> None:
    header = panel.table.view.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))


def _click_row(qtbot, panel: FeaturesPanel, row: int) -> None:
    view = panel.table.view
    rect = view.visualRect(panel.table.model.index(row, 1))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_the_panel_offers_its_whole_protocol():
    members = {n for n in vars(FeaturesView) if not n.startswith("_")} | set(typing.get_type_hints(FeaturesView))
    missing = sorted(m for m in members if not hasattr(FeaturesPanel, m))
    assert not missing


# -- the source form ----------------------------------------------------------------------------------
def test_layer_site_and_kind_changes_ask_for_a_dictionary(qtbot, panel):
    form = panel.source
    assert [form.layer.itemText(i) for i in range(form.layer.count())] == ["0", "1", "2", "3"]
    with qtbot.waitSignal(panel.dictionaryRequested) as blocker:
        form.layer.setCurrentIndex(2)
    assert blocker.args == ["neurons", 2, "resid"]
    assert not form.site.isEnabled()  # neurons are the MLP's: the site is an SAE's choice
    with qtbot.waitSignal(panel.dictionaryRequested) as blocker:
        qtbot.mouseClick(form.sae, Qt.MouseButton.LeftButton)
    assert blocker.args == ["sae", 2, "resid"] and form.site.isEnabled() and form.sae_row.isVisible()
    with qtbot.waitSignal(panel.dictionaryRequested) as blocker:
        form.site.setCurrentIndex(form.site.findData("mlp"))
    assert blocker.args == ["sae", 2, "mlp"]
    with qtbot.waitSignal(panel.dictionaryRequested) as blocker:
        qtbot.mouseClick(form.neurons, Qt.MouseButton.LeftButton)
    assert blocker.args[0] == "neurons" and not form.sae_row.isVisible()


def test_set_source_shows_the_dictionary_without_asking_for_it(qtbot, panel):
    with qtbot.assertNotEmitted(panel.dictionaryRequested):
        panel.set_source("sae", 3, "mlp")
    form = panel.source
    assert form.sae.isChecked() and form.layer.currentIndex() == 3 and form.site.currentData() == "mlp"
    with qtbot.assertNotEmitted(panel.dictionaryRequested):
        panel.set_layers(2)  # a smaller model: the layer list is refilled quietly
    assert form.layer.count() == 2 and form.layer.currentIndex() == 1


def test_train_sends_the_settings_with_sensible_defaults(qtbot, panel):
    panel.set_source("sae", 1, "resid")
    with qtbot.waitSignal(panel.trainRequested) as blocker:
        qtbot.mouseClick(panel.source.train, Qt.MouseButton.LeftButton)
    assert blocker.args[0] == {"layer": 1, "site": "resid", "width": 1024, "k": 16, "tokens": 2_000_000,
                               "corpus": "builtin", "path": ""}


def test_corpus_choices_follow_the_controller(qtbot, panel):
    panel.set_source("sae", 0, "mlp")
    form = panel.source
    item = form.corpus.model().item
    assert not item(form.corpus.findData("run")).isEnabled() and not item(form.corpus.findData("file")).isEnabled()
    with qtbot.waitSignal(panel.browseRequested):
        qtbot.mouseClick(form.browse, Qt.MouseButton.LeftButton)
    panel.set_corpus_choices(True, "/data/my corpus.txt")
    assert item(form.corpus.findData("run")).isEnabled()
    assert form.corpus.currentData() == "file" and form.file_label.text() == "my corpus.txt"
    with qtbot.waitSignal(panel.trainRequested) as blocker:
        form.train.click()
    assert blocker.args[0]["corpus"] == "file" and blocker.args[0]["path"] == "/data/my corpus.txt"
    form.corpus.setCurrentIndex(form.corpus.findData("run"))
    panel.set_corpus_choices(False, "/data/my corpus.txt")  # the run went away: back to the built-in text
    assert form.corpus.currentData() == "builtin"


def test_training_toggles_the_buttons_and_shows_progress(qtbot, panel):
    panel.set_source("sae", 0, "resid")
    form = panel.source
    assert form.train.isEnabled() and not form.cancel.isEnabled()
    panel.set_training(True)
    assert not form.train.isEnabled() and form.cancel.isEnabled() and form.progress_row.isVisible()
    assert not form.layer.isEnabled()  # the source stays put while its SAE trains
    panel.set_progress(300, 1000, "step 300/1000 · ETA 17 s")
    assert form.progress.value() == 300 and form.progress.maximum() == 1000
    assert form.progress_text.text() == "step 300/1000 · ETA 17 s"
    with qtbot.waitSignal(panel.cancelRequested):
        qtbot.mouseClick(form.cancel, Qt.MouseButton.LeftButton)
    panel.set_training(False)
    assert form.train.isEnabled() and not form.cancel.isEnabled() and form.layer.isEnabled()


def test_status_error_and_metrics_lines(panel):
    panel.set_metrics("<b>L0</b> 16.0 (active latents per token)")
    assert panel.metrics.isVisible() and "L0" in panel.metrics.text()
    panel.set_error("k must be below width (k 16, width 8): raise the width")
    assert panel.status.isVisible() and "#dc2626" in panel.status.text() and "raise the width" in panel.status.text()
    panel.set_status("")
    assert not panel.status.isVisible()


# -- the table ----------------------------------------------------------------------------------------
def test_header_clicks_sort_by_the_numbers(qtbot, panel):
    _table(panel)
    assert _shown_ids(panel) == list(range(12))  # by id, 10 after 9
    _click_header(qtbot, panel, 2)  # max act, ascending: 0, 1, …, 9, 10, 11 (text order would put 10 after 1)
    assert _shown_ids(panel) == list(range(12))
    _click_header(qtbot, panel, 2)
    assert _shown_ids(panel) == list(range(11, -1, -1))
    _click_header(qtbot, panel, 1)  # density falls with the id
    order = panel.table.view.horizontalHeader().sortIndicatorOrder()
    by_density = list(range(11, -1, -1)) if order == Qt.SortOrder.AscendingOrder else list(range(12))
    assert _shown_ids(panel) == by_density
    _click_header(qtbot, panel, 3)  # logit effect: the NaN (feature 3) last in either order
    assert _shown_ids(panel)[-1] == 3
    _click_header(qtbot, panel, 3)
    assert _shown_ids(panel)[-1] == 3
    assert panel.table.model.data(panel.table.model.index(11, 3)) == "—"


def test_a_large_table_sorts_like_numpy(qtbot, panel):
    rng = np.random.default_rng(0)
    n = 6144
    density = rng.random(n)
    panel.set_table(np.arange(n), density, rng.random(n), rng.normal(size=n), [str(i) for i in range(n)])
    assert panel.table.model.rowCount() == n
    panel.table.view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert _shown_ids(panel)[:50] == list(np.argsort(-density, kind="stable")[:50])


def test_selecting_a_row_announces_its_feature(qtbot, panel):
    _table(panel)
    _click_header(qtbot, panel, 2)
    _click_header(qtbot, panel, 2)  # descending: row 1 shows feature 10
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        _click_row(qtbot, panel, 1)
    assert blocker.args == [10] and panel.selected_feature() == 10
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        qtbot.keyClick(panel.table.view, Qt.Key.Key_Down)
    assert blocker.args == [9]
    with qtbot.assertNotEmitted(panel.featureSelected):
        _click_header(qtbot, panel, 1)  # another order: the same feature stays selected, quietly
        assert panel.table.model.feature_at(panel.table.view.currentIndex().row()) == 9
        _table(panel)  # new numbers for the same features: the selection stays, quietly
        _feature(panel, 4)  # the controller shows another: it becomes the selection, quietly
    assert panel.selected_feature() == 4
    assert panel.table.model.feature_at(panel.table.view.currentIndex().row()) == 4
    panel.set_table(np.arange(3), np.ones(3), np.ones(3), np.ones(3), ["a", "b", "c"])  # a smaller dictionary
    assert panel.selected_feature() is None and not panel.table.view.selectionModel().hasSelection()


def test_ctrl_f_filters_and_arrows_move_the_selection(qtbot, panel):
    _table(panel)
    panel.table.view.setFocus()
    qtbot.keyClick(panel.table.view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert panel.table.filter.hasFocus()
    qtbot.keyClicks(panel.table.filter, "1")
    assert _shown_ids(panel) == [1, 10, 11]  # ids starting with 1 (and labels "tok1…")
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        qtbot.keyClick(panel.table.filter, Qt.Key.Key_Down)
    assert blocker.args == [1]
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        qtbot.keyClick(panel.table.filter, Qt.Key.Key_Down)
    assert blocker.args == [10]
    panel.table.filter.setText("tok7")
    assert _shown_ids(panel) == [7]


# -- the selected feature -------------------------------------------------------------------------------
def test_contexts_are_shaded_where_the_feature_fires_and_nowhere_else(panel):
    assert shade(2.0, 4.0) is not None and shade(0.0, 4.0) is None and shade(-1.0, 4.0) != shade(1.0, 4.0)
    tokens, acts = ["a", "b", "<b>", " ", "\n"], np.array([3.0, 0.0, 0.0, 0.0, 1.0])
    html = contexts_html([(tokens, acts)])
    spans = html.count("background-color")
    assert spans == 2  # "a" and the newline, not the zeros
    assert "&lt;b&gt;" in html and "<b>" not in html  # a token's text is text, never markup
    assert "␣" in html and "↵" in html  # whitespace is visible
    with pytest.raises(ValueError, match="pair up"):
        contexts_html([(["a", "b"], np.array([1.0]))])


def test_set_feature_fills_the_detail(panel):
    _table(panel)
    _feature(panel, 5)
    d = panel.detail
    assert "Feature 5" in d.title.text()
    assert d.context_view.toPlainText().count("\n") == 2  # three contexts, one line each
    assert "background-color" in d.context_view.toHtml()
    assert np.array_equal(d.histogram.heights(), [40, 10, 3, 0])
    assert np.array_equal(d.histogram.bars.opts["x0"], [0, 1, 2, 3])
    d.histogram.log.setChecked(True)
    assert np.allclose(d.histogram.heights(), np.log10(1 + np.array([40, 10, 3, 0])))
    assert d.promoted.texts() == ["␣the  +2.50", "↵  +1.00"] and d.suppressed.texts() == ["z  -1.50"]
    panel.clear_feature("This feature never fires on the corpus.")
    assert d.title.text() == "This feature never fires on the corpus." and d.context_view.toPlainText() == ""
    assert len(d.histogram.heights()) == 0 and d.promoted.texts() == []


def test_clamp_and_ablate_the_selected_feature(qtbot, panel):
    bar = panel.detail.edit_bar
    assert not bar.clamp.isEnabled() and not bar.ablate.isEnabled()  # nothing selected
    _table(panel)
    _click_row(qtbot, panel, 12 - 1)
    assert bar.clamp.isEnabled()
    bar.value.setValue(7.5)
    with qtbot.waitSignal(panel.editRequested) as blocker:
        qtbot.mouseClick(bar.clamp, Qt.MouseButton.LeftButton)
    assert blocker.args == [11, 7.5]
    with qtbot.waitSignal(panel.editRequested) as blocker:
        qtbot.mouseClick(bar.ablate, Qt.MouseButton.LeftButton)
    assert blocker.args == [11, 0.0]
    assert not bar.reset.isEnabled()
    panel.set_edits("feature 11 → 7.5 · feature 40 → 0")
    assert bar.edits.text() == "feature 11 → 7.5 · feature 40 → 0" and bar.reset.isEnabled()
    with qtbot.waitSignal(panel.resetEditsRequested):
        qtbot.mouseClick(bar.reset, Qt.MouseButton.LeftButton)


def test_over_training_tab_waits_for_data(panel):
    d = panel.detail
    assert not d.tabs.isTabEnabled(1)
    steps = np.array([0, 100, 200, 300])
    panel.set_over_training(steps, {"density": np.array([0.0, np.nan, 0.01, 0.02]),
                                    "max activation": np.array([0.0, 1.0, 2.0, 3.0])}, 200)
    assert d.tabs.isTabEnabled(1) and d.training_chart.series_names == ["density", "max activation"]
    x, y = d.training_chart.curve_data("max activation")
    assert np.array_equal(x, steps) and np.array_equal(y, [0, 1, 2, 3])
    assert d.training_chart.marker_step("density") == 200
    panel.set_over_training(steps, {"density": np.zeros(4), "max activation": np.ones(4)}, None)
    assert d.training_chart.marker_step("density") is None
    panel.set_over_training(np.zeros(0), {}, None)
    assert not d.tabs.isTabEnabled(1)


# -- the prompt ---------------------------------------------------------------------------------------
def test_prompt_chips_are_shaded_by_activation_and_clickable(qtbot, panel):
    typed = []
    panel.promptChanged.connect(typed.append)
    qtbot.keyClicks(panel.prompt.prompt, "hi")
    assert typed == ["h", "hi"] and panel.prompt_text() == "hi"
    with qtbot.assertNotEmitted(panel.promptChanged):
        panel.set_prompt_text("hi")
    panel.set_prompt_activations(["The", " cat", " sat"], np.array([0.0, 2.5, -1.0]))
    chips = panel.prompt.chips
    QApplication.processEvents()
    assert chips.labels == ["The", "␣cat", "␣sat"]
    assert chips.fill(0) is None and chips.fill(1) is not None and chips.fill(1).alphaF() == pytest.approx(1.0)
    assert chips.fill(2) is not None and chips.fill(2).blue() > chips.fill(2).red()  # negative: blue
    image = chips.grab().toImage()
    r = chips.chip_rect(1)
    assert image.pixelColor(int(r.left()) + 3, int(r.center().y())).red() > 200  # orange painted
    with qtbot.waitSignal(panel.tokenClicked) as blocker:
        qtbot.mouseClick(chips, Qt.MouseButton.LeftButton, pos=chips.chip_rect(2).center().toPoint())
    assert blocker.args == [2]
    panel.set_prompt_activations(["The", " cat", " sat"], None)
    assert chips.fill(1) is None


def test_a_tokens_features_are_links_to_them(qtbot, panel):
    _table(panel)
    panel.set_prompt_activations(["a", "b"], np.array([1.0, 0.0]))
    panel.set_token_features(1, "b", [(7, 2.25, "tok7"), (3, 0.5, "<x>")])
    text = panel.prompt.token_features.text()
    assert "position 1" in text and "#7" in text and "2.25" in text and "&lt;x&gt;" in text
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        panel.prompt.token_features.linkActivated.emit("feature:7")
    assert blocker.args == [7] and panel.selected_feature() == 7
    panel.set_token_features(0, "a", [])
    assert "no feature fires" in panel.prompt.token_features.text()


# -- everything at once, export, layout ---------------------------------------------------------------
def test_clear_results_empties_everything_model_derived(panel):
    _table(panel)
    _feature(panel)
    panel.set_metrics("L0 16")
    panel.set_prompt_text("abc")
    panel.set_prompt_activations(["a", "b"], np.array([1.0, 0.0]))
    panel.set_over_training(np.arange(3), {"density": np.ones(3)}, 1)
    panel.clear_results("The model changed: choose a dictionary again.")
    assert panel.table.model.rowCount() == 0 and panel.selected_feature() is None
    assert panel.detail.feature is None and panel.detail.context_view.toPlainText() == ""
    assert panel.prompt.chips.labels == [] and panel.prompt.chips.acts is None
    assert not panel.metrics.isVisible() and "model changed" in panel.status.text()
    assert "model changed" in panel.detail.title.text() and not panel.detail.tabs.isTabEnabled(1)
    assert not panel.detail.edit_bar.clamp.isEnabled()
    assert panel.prompt_text() == "abc"  # the user's text is not the model's


def test_export_menu_asks_for_each_csv_and_json(qtbot, panel):
    actions = panel.export_button.menu().actions()
    kinds = []
    panel.exportRequested.connect(kinds.append)
    for action in actions:
        action.trigger()
    assert kinds == ["table-csv", "contexts-csv", "saedashboard-json", "neuronpedia-json"]


def test_csv_exports_carry_the_metadata_and_what_is_on_screen(tmp_path, qtbot, panel):
    path = tmp_path / "table.csv"
    assert panel.export_table_csv(str(path), {"model": "x"}) is False and not path.exists()  # nothing to write
    _table(panel)
    _click_header(qtbot, panel, 2)
    _click_header(qtbot, panel, 2)  # descending by max act: what is on screen is what is written
    meta = {"model": "char-2L", "dictionary": "SAE layer 1 resid\nwidth 1024", "skipped": None}
    assert panel.export_table_csv(str(path), meta) is True
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["# model: char-2L", "# dictionary: SAE layer 1 resid\\nwidth 1024",
                         "feature,density_fraction,max_activation,logit_effect,label"]
    assert lines[3].split(",") == ["11", "0.001", "11", "1.1", "tok11"]
    assert len(lines) == 3 + 12
    panel.table.filter.setText("tok1")
    panel.export_table_csv(str(path), {})
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# filter: 'tok1' (3 of 12 features)") and len(text.splitlines()) == 1 + 1 + 3

    ctx = tmp_path / "contexts.csv"
    assert panel.export_contexts_csv(str(ctx), {}) is False
    _feature(panel, 5)
    assert panel.export_contexts_csv(str(ctx), {"feature": 5}) is True
    rows = ctx.read_text(encoding="utf-8").splitlines()
    assert rows[0] == "# feature: 5" and rows[1] == "feature,context,position,token,activation"
    assert rows[2] == "5,0,0,t,0" and rows[4] == "5,0,2,e,2"  # "the…": e is a vowel, shaded 2.0
    assert len(rows) == 2 + 3 * 20
    with pytest.raises(OSError):
        panel.export_contexts_csv(str(tmp_path / "missing" / "x.csv"), {})


def _inside(panel, widget) -> bool:
    top_left = widget.mapTo(panel, QPoint(0, 0))
    return (widget.isVisible() and widget.width() > 20 and widget.height() > 12 and top_left.x() >= 0
            and top_left.y() >= 0 and top_left.x() + widget.width() <= panel.width()
            and top_left.y() + widget.height() <= panel.height())


def test_at_900_by_600_the_key_parts_fit(qtbot, panel):
    panel.set_source("sae", 1, "resid")
    panel.set_training(True)
    panel.set_progress(1, 10, "step 1/10")
    panel.set_metrics("<b>L0</b> 16.0 (active latents per token) · <b>explained variance</b> 0.97 (share of the "
                      "variance reconstructed) · <b>CE loss recovered</b> 0.99 · <b>dead</b> 12%")
    panel.set_status("SAE layer 1 resid")
    _table(panel)
    _feature(panel)
    panel.set_prompt_activations(list("a prompt of some tokens"), np.ones(23))
    panel.resize(900, 600)
    QApplication.processEvents()
    assert panel.minimumSizeHint().width() <= 900 and panel.width() == 900
    parts = {"table": panel.table.view, "filter": panel.table.filter, "contexts": panel.detail.context_view,
             "histogram": panel.detail.histogram.plot_widget, "promoted": panel.detail.promoted.list,
             "prompt": panel.prompt.prompt, "chips": panel.prompt.chips, "train": panel.source.train,
             "cancel": panel.source.cancel, "progress": panel.source.progress, "export": panel.export_button,
             "clamp": panel.detail.edit_bar.clamp, "reset": panel.detail.edit_bar.reset,
             "metrics": panel.metrics, "layer": panel.source.layer, "context": panel.detail.examples.after,
             "density tab": panel.left.tabBar()}
    clipped = [name for name, widget in parts.items() if not _inside(panel, widget)]
    assert not clipped
    header = panel.table.view.horizontalHeader()
    assert header.length() <= panel.table.view.viewport().width()  # every column in view, label included
    assert panel.detail.context_view.height() >= 80 and panel.detail.histogram.plot_widget.height() >= 90
    tabs = panel.detail.tabs.tabBar()  # every tab's name whole: Examples, Over training, Nearest
    assert all(tabs.tabRect(i).right() <= tabs.width() for i in range(tabs.count()))


# -- the dashboard (issue 39) ---------------------------------------------------------------------------
def _groups() -> list:
    tokens = ["a", "q", "u", "e"]
    return [("top 2 activations (max 3)", [(tokens, np.array([0.0, 3.0, 0.0, 0.0]), 1),
                                           (tokens, np.array([0.0, 2.0, 0.5, 0.0]), 1)]),
            ("activation 0–1.5 · 1 % of tokens", [(tokens, np.array([0.0, 2.0, 0.5, 0.0]), 2)]),
            ("activation 1.5–3 · 0 % of tokens", [])]


def test_example_groups_replace_the_top_contexts_with_headings_and_the_picked_token(panel):
    _table(panel)
    _feature(panel, 5)
    d = panel.detail
    panel.set_dashboard(5, 0.01, _groups(), [], [], [])
    text = d.context_view.toPlainText()
    assert "top 2 activations (max 3)" in text and "activation 0–1.5 · 1 % of tokens" in text
    assert "(no token in this range)" in text  # an empty interval says so
    lines = [line for line in text.splitlines() if "│" in line]
    assert [float(line.split("│")[0]) for line in lines] == [3.0, 2.0, 0.5]  # the picked token's value, not the peak
    _feature(panel, 5)  # the same feature's detail again (a table measured anew): its groups stay
    assert "top 2 activations" in d.context_view.toPlainText()
    panel.set_dashboard(6, 0.01, _groups(), [], [], [])  # another feature's dashboard before its detail: kept until it is shown
    assert d.examples.groups and "Feature 5" in d.title.text()
    _feature(panel, 6)
    assert "top 2 activations" in d.context_view.toPlainText() and d.feature == 6


def test_the_examples_csv_names_each_rows_group_and_picked_token(tmp_path, panel):
    _table(panel)
    _feature(panel, 5)
    panel.set_dashboard(5, 0.01, _groups(), [], [], [])
    path = tmp_path / "x.csv"
    assert panel.export_contexts_csv(str(path), {})
    rows = path.read_text(encoding="utf-8").splitlines()
    assert rows[0] == "feature,context,position,token,activation,group,picked"
    assert rows[2] == "5,0,1,q,3,top 2 activations (max 3),1" and len(rows) == 1 + 3 * 4


def test_the_context_width_asks_and_is_read(qtbot, panel):
    assert panel.context_width() == (12, 3)
    with qtbot.waitSignal(panel.contextChanged) as blocker:
        panel.detail.examples.after.setValue(8)
    assert blocker.args == [12, 8] and panel.context_width() == (12, 8)


def test_a_nearest_features_row_selects_it(qtbot, panel):
    _table(panel)
    _feature(panel, 5)
    panel.set_dashboard(5, 0.01, [], np.array([7, 2]), np.array([0.61234, -0.2]), ["tok7", ""])
    assert panel.detail.neighbours.rows() == [("7", "+0.612", "tok7"), ("2", "-0.200", "—")]
    with qtbot.waitSignal(panel.featureSelected) as blocker:
        panel.detail.neighbours.table.cellClicked.emit(0, 2)
    assert blocker.args == [7] and panel.selected_feature() == 7
    _feature(panel, 8)  # another feature: the old one's neighbours go until its own come
    assert panel.detail.neighbours.rows() == []


def test_the_density_histogram_marks_dead_dense_and_the_selected_feature(panel):
    edges = np.linspace(-3.0, 0.0, 7)  # log10 density, 0.1 % to 100 %
    counts = np.array([4, 3, 2, 1, 5, 6])
    panel.set_density(edges, counts, 9, 11, 0.1, 40, 1000)
    chart = panel.density
    x0, h = np.asarray(chart.fired.opts["x0"]), np.asarray(chart.fired.opts["height"])
    dense_x0 = np.asarray(chart.dense_bars.opts["x0"])
    assert list(h) == [4, 3, 2, 1] and list(chart.dense_bars.opts["height"]) == [5, 6]  # right of 10 %: red
    assert dense_x0.min() >= -1.0 and x0.max() < -1.0 and chart.dense_line.value() == pytest.approx(-1.0)
    assert list(chart.dead_bar.opts["height"]) == [9] and chart.dead_bar.opts["x1"][0] < edges[0]  # left of one firing
    caption = chart.caption.text()
    assert "40 features on 1,000 held-out tokens" in caption and "9 dead" in caption and "22.5%" in caption
    assert "11 dense" in caption and "10%" in caption
    _table(panel)
    _feature(panel, 5)
    panel.set_dashboard(5, 0.01, [], [], [], [])  # the selected feature's place
    assert chart.marker_position() == pytest.approx(-2.0)
    panel.set_dashboard(5, 0.0, [], [], [], [])  # a dead feature: on the dead bar
    assert chart.dead_bar.opts["x0"][0] <= chart.marker_position() <= chart.dead_bar.opts["x1"][0]
    panel.clear_results("gone")
    assert chart.marker_position() is None and chart.caption.text() == ""
