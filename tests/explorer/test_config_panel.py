"""Config & parameters panel: live closed-form readout, tie toggle, invalid input, Build."""
from __future__ import annotations

import pytest

from explorer.controllers.base import PanelPage
from explorer.controllers.config import ConfigController
from gptcore.model.config import GPTConfig
from gptcore.model.params import count_parameters

TINY_BUILD = dict(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=32)


@pytest.fixture
def page(qtbot, panel_context):
    p = PanelPage(panel_context, ConfigController)
    qtbot.addWidget(p)
    return p


def _total_shown(page) -> int:
    text = page.view.total_label.text()  # "3.27M parameters  (3,268,736)"
    return int(text.split("(")[1].rstrip(")").replace(",", ""))


def _form_config(page) -> GPTConfig:
    return GPTConfig(**page.view.values())


def test_panel_starts_with_the_loaded_models_config(page, tiny_session):
    assert GPTConfig(**page.view.values()) == tiny_session.model.config
    assert _total_shown(page) == tiny_session.info.n_params == count_parameters(tiny_session.model.config).total
    assert "tiny (test)" in page.view.loaded_label.text()


def test_editing_n_layer_and_n_embd_updates_the_readout(page):
    view = page.view
    view.inputs["n_layer"].setValue(5)
    assert _total_shown(page) == count_parameters(_form_config(page)).total
    view.inputs["n_embd"].setValue(96)
    cfg = _form_config(page)
    assert (cfg.n_layer, cfg.n_embd) == (5, 96)
    count = count_parameters(cfg)
    assert _total_shown(page) == count.total
    # the component table agrees row by row, and its last row is the total
    table = view.table
    for row, comp in enumerate(count.by_component.values()):
        assert table.item(row, 0).text().startswith(comp.name)
        assert table.item(row, 2).text() == f"{comp.total:,}"
    assert table.item(table.rowCount() - 1, 2).text() == f"{count.total:,}"
    assert view.figure_labels["nanogpt"].text() == f"{count.non_embedding:,}"
    # the chart's bars are the components' shares of the total
    widths = view.bars.opts["width"]
    assert sum(widths) == pytest.approx(100.0)
    assert view.preset.currentText() == "custom"


def test_toggling_tie_changes_the_total_by_vocab_times_n_embd(page):
    view = page.view
    tied = _total_shown(page)
    assert view.figure_labels["tied_note"].text() == "← this config"
    view.inputs["tie_weights"].setChecked(False)
    untied = _total_shown(page)
    cfg = _form_config(page)
    assert untied - tied == cfg.vocab_size * cfg.n_embd
    assert view.figure_labels["difference"].text() == f"{cfg.vocab_size * cfg.n_embd:,}"
    assert view.figure_labels["untied_note"].text() == "← this config"
    assert view.figure_labels["tied"].text() == f"{tied:,}" and view.figure_labels["untied"].text() == f"{untied:,}"


def test_preset_box_fills_the_form(page):
    view = page.view
    view.preset.setCurrentText("gpt2-medium")
    view.presetChosen.emit("gpt2-medium")
    assert GPTConfig(**page.view.values()) == GPTConfig.preset("gpt2-medium")
    assert _total_shown(page) == count_parameters(GPTConfig.preset("gpt2-medium")).total == 354_823_168
    assert view.preset.currentText() == "gpt2-medium"


def test_fault_invalid_n_head_shows_the_message_and_keeps_the_last_readout(page):
    view = page.view
    before = _total_shown(page)
    view.inputs["n_head"].setValue(5)  # 64 is not divisible by 5
    assert view.error_label.isVisibleTo(page)
    assert "n_head" in view.error_label.text() and "not divisible" in view.error_label.text()
    assert view.inputs["n_head"].property("invalid") is True
    assert "not divisible" in view.inputs["n_head"].toolTip()
    assert _total_shown(page) == before  # last valid readout kept
    assert not view.build_button.isEnabled()
    view.inputs["n_head"].setValue(8)  # valid again: message gone, readout live
    assert not view.error_label.isVisibleTo(page) and view.inputs["n_head"].property("invalid") is False
    assert view.build_button.isEnabled()
    assert _total_shown(page) == count_parameters(_form_config(page)).total


def test_fault_other_bad_values_name_their_field(page):
    view = page.view
    view.inputs["layer_norm_eps"].setText("abc")
    view.inputs["layer_norm_eps"].textEdited.emit("abc")
    assert "layer_norm_eps" in view.error_label.text()
    view.inputs["layer_norm_eps"].setText("1e-5")
    view.inputs["layer_norm_eps"].textEdited.emit("1e-5")
    view.inputs["n_layer"].setValue(0)
    assert "n_layer" in view.error_label.text() and "positive" in view.error_label.text()
    assert view.inputs["n_layer"].property("invalid") is True


def _set_form(view, values: dict) -> None:
    for name, value in values.items():
        view.inputs[name].setValue(value)


def test_building_a_tiny_model_swaps_it_in_and_updates_the_status_bar(qtbot, window, tiny_session):
    page = window.show_panel("config")
    view = page.view
    _set_form(view, TINY_BUILD)
    view.init_scheme.setCurrentText("xavier-normal")
    old_model, version = tiny_session.model, tiny_session.version
    with qtbot.waitSignal(window.modelChanged, timeout=30000):
        view.build_button.click()
    # The swap is announced from inside the build task; "Built …" is written by its result, a moment later.
    qtbot.waitUntil(lambda: view.build_status.text().startswith("Built"), timeout=30000)
    expected = count_parameters(GPTConfig(**TINY_BUILD)).total
    assert tiny_session.version == version + 1 and tiny_session.model is not old_model
    assert tiny_session.model.config == GPTConfig(**TINY_BUILD)
    assert tiny_session.info.n_params == expected
    assert window.status_labels["params"].toolTip().startswith(f"{expected:,} parameters")
    assert "xavier-normal" in window.status_labels["model"].text()
    assert window.status_labels["trained"].text() == "UNTRAINED"
    assert "Built" in view.build_status.text() and f"{expected:,}" in view.build_status.text()
    assert GPTConfig(**view.values()) == GPTConfig(**TINY_BUILD)  # the panel shows the new model's config


def test_fault_build_refused_over_memory_with_the_estimate(qtbot, window, tiny_session):
    view = window.show_panel("config").view
    _set_form(view, dict(n_layer=512, n_embd=16384, n_head=64))
    before, version = tiny_session.model, tiny_session.version
    view.build_button.click()
    text = view.build_status.text()
    assert text.startswith("Not built") and "TiB" in text and "smaller" in text
    assert not window.runner.busy and tiny_session.model is before and tiny_session.version == version


def test_fault_cuda_oom_during_build_suggests_cpu_or_a_smaller_model(qtbot, window, tiny_session, monkeypatch):
    import torch

    import gptcore.model.init

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(gptcore.model.init, "init_weights", oom)
    view = window.show_panel("config").view
    _set_form(view, TINY_BUILD)
    before = tiny_session.model
    view.build_button.click()
    qtbot.waitUntil(lambda: window.error_dialog is not None, timeout=30000)
    message = window.error_dialog.text()
    assert window.error_dialog.windowTitle() == "Out of GPU memory"
    assert "--device cpu" in message and "smaller model" in message
    assert tiny_session.model is before
    assert "Not built" in view.build_status.text()
    view.inputs["n_layer"].setValue(3)  # still responsive
    assert _total_shown(window.panel("config")) == count_parameters(GPTConfig(**{**TINY_BUILD, "n_layer": 3})).total
    window.error_dialog.close()


def test_vocab_below_the_tokenizer_is_a_warning_at_the_field_that_still_builds(page):
    view = page.view
    view.inputs["vocab_size"].setValue(1000)
    assert view.inputs["vocab_size"].property("warning") is True
    text = view.warning_label.text()
    assert "1,000" in text and "50,257" in text and "Generation" in text  # says what will happen
    assert view.build_button.isEnabled() and not view.error_label.isVisibleTo(page)  # the user may accept it
    view.inputs["vocab_size"].setValue(50304)  # nanoGPT's padded vocabulary covers every id
    assert view.inputs["vocab_size"].property("warning") is False and not view.warning_label.isVisibleTo(page)


def test_an_invalid_field_dims_the_readout_and_the_preset_says_custom(page):
    view = page.view
    view.preset.setCurrentText("gpt2-xl")
    view.preset.activated.emit(view.preset.currentIndex())
    assert view.preset.currentText() == "gpt2-xl" and not view.readout_dimmed()
    view.inputs["n_head"].setValue(7)  # 1600 is not divisible by 7
    assert view.readout_dimmed() and view.preset.currentText() == "custom"
    assert "last valid config" in view.error_label.text()
    # the spin box is tinted through its palette: no style sheet, so its arrows stay native
    assert view.inputs["n_head"].styleSheet() == "" and view.inputs["n_head"].property("invalid") is True
    view.inputs["n_head"].setValue(25)
    assert not view.readout_dimmed() and view.preset.currentText() == "gpt2-xl"


def test_build_names_the_preset_when_the_config_equals_one(qtbot, window, tiny_session, monkeypatch):
    from explorer.session import models as session_models  # its check_fits is bypassed below

    view = window.show_panel("config").view
    monkeypatch.setattr(session_models, "check_fits", lambda *_a, **_k: None)
    view.preset.setCurrentText("distilgpt2")
    view.preset.activated.emit(view.preset.currentIndex())
    view.inputs["block_size"].setValue(64)  # not the preset any more: named by its shape
    assert view.preset.currentText() == "custom"
    with qtbot.waitSignal(window.modelChanged, timeout=60000):
        view.build_button.click()
    assert tiny_session.info.name.startswith("custom (6L × 768")
    view.inputs["block_size"].setValue(1024)  # distilgpt2 exactly
    assert view.preset.currentText() == "distilgpt2"
    with qtbot.waitSignal(window.modelChanged, timeout=60000):
        view.build_button.click()
    assert tiny_session.info.name == "distilgpt2 shape (gpt2 init)"
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)


def test_cancel_build_keeps_the_current_model_and_says_so(qtbot, window, tiny_session):
    view = window.show_panel("config").view
    _set_form(view, TINY_BUILD)
    before, version = tiny_session.model, tiny_session.version
    view.build_button.click()
    assert view.cancel_build_button.isVisibleTo(view)
    view.cancel_build_button.click()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)
    assert tiny_session.model is before and tiny_session.version == version
    assert "cancelled" in view.build_status.text() and "tiny (test)" in view.build_status.text()
    assert not view.cancel_build_button.isVisibleTo(view) and view.build_button.isEnabled()


def test_modern_parts_in_the_form_recount_live_and_explain_each_difference(page):
    view = page.view
    view.preset.setCurrentText("gpt2")
    view.preset.activated.emit(view.preset.currentIndex())
    view.inputs["pos_embedding"].setCurrentText("sinusoidal")
    text = view.readout.parts_label.text()
    assert "sinusoidal: −786,432 vs learned" in text  # GPT-2 small's 1024 × 768 table, gone
    assert _total_shown(page) == count_parameters(GPTConfig.preset("gpt2", pos_embedding="sinusoidal")).total
    view.inputs["pos_embedding"].setCurrentText("rope")
    view.inputs["n_kv_head"].setValue(4)
    view.inputs["norm"].setCurrentText("rmsnorm")
    view.inputs["mlp"].setCurrentText("swiglu")
    cfg = GPTConfig.preset("gpt2", pos_embedding="rope", n_kv_head=4, norm="rmsnorm", mlp="swiglu")
    assert _form_config(page) == cfg and _total_shown(page) == count_parameters(cfg).total
    text = view.readout.parts_label.text()
    assert "grouped-query 12/4: K and V projections ×1/3" in text and "swiglu:" in text and "rmsnorm:" in text
    assert view.preset.currentText() == "custom"
    view.inputs["n_kv_head"].setValue(5)  # 12 query heads cannot share 5 key/value heads
    assert view.inputs["n_kv_head"].property("invalid") is True and "divisible" in view.error_label.text()
    view.inputs["n_kv_head"].setValue(0)  # '= n_head'
    assert _form_config(page).n_kv_head is None and not view.error_label.isVisibleTo(page)


def test_activation_row_sets_nanogpts_exact_gelu(page):
    from PySide6.QtCore import Qt

    view = page.view
    box = view.inputs["activation"]
    assert box.currentText() == "gelu_tanh" and box.focusPolicy() == Qt.FocusPolicy.StrongFocus
    box.setCurrentText("gelu")
    assert _form_config(page).activation == "gelu"
    assert "GELU (exact)" in view.readout.parts_label.text()
    assert view.preset.currentText() == "custom"


def test_building_a_grouped_query_rotary_model(qtbot, window, tiny_session):
    view = window.show_panel("config").view
    _set_form(view, dict(TINY_BUILD, n_head=4, n_kv_head=2))
    view.inputs["pos_embedding"].setCurrentText("rope")
    view.inputs["norm"].setCurrentText("rmsnorm")
    view.inputs["mlp"].setCurrentText("swiglu")
    with qtbot.waitSignal(window.modelChanged, timeout=30000):
        view.build_button.click()
    cfg = tiny_session.model.config
    assert (cfg.pos_embedding, cfg.norm, cfg.mlp, cfg.kv_heads) == ("rope", "rmsnorm", "swiglu", 2)
    assert tiny_session.info.n_params == count_parameters(cfg).total
    page = window.show_panel("attention")  # every view works on it
    page.set_prompt("Every effort moves you")
    qtbot.waitUntil(lambda: page.controller.result is not None and page.controller.result.n_head == 4,
                    timeout=30000)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)


def test_build_progress_moves_module_by_module(qtbot, window, tiny_session, monkeypatch):
    view = window.show_panel("config").view
    _set_form(view, dict(TINY_BUILD, n_layer=6))
    seen = []
    real = view.set_build_progress
    monkeypatch.setattr(view, "set_build_progress", lambda d, t, m: (seen.append((d, t, m)), real(d, t, m)))
    with qtbot.waitSignal(window.modelChanged, timeout=30000):
        view.build_button.click()
    done = [d for d, _t, _m in seen]
    assert done == sorted(done) and len(set(done)) > 6 * 4  # real steps, not three jumps
    assert any("blocks.5." in m for _d, _t, m in seen)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30000)


def test_zero_rows_say_why_and_the_qkv_bias_gap_is_explained(page, tmp_path):
    """Issue 23: a rotary model's chart said "position embedding 0 (tied)"; the book's qkv_bias=False
    count (124,412,160) sat 27,648 below Hugging Face's without a word."""
    view = page.view
    view.preset.setCurrentText("gpt2")
    view.preset.activated.emit(view.preset.currentIndex())
    view.inputs["pos_embedding"].setCurrentText("rope")
    bars = {t.textItem.toPlainText().strip() for t in view.readout._bar_texts}
    assert "0 (computed, no table)" in bars and "0 (tied)" in bars  # positions computed; head tied
    rows = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert "position embedding (computed: no table)" in rows
    assert "output head (tied: shares the token embedding)" in rows
    view.inputs["pos_embedding"].setCurrentText("learned")
    view.inputs["qkv_bias"].setCurrentText("off")
    assert _total_shown(page) == 124_412_160
    text = view.readout.parts_label.text()
    assert "qkv_bias off: −27,648 vs GPT-2" in text and "Hugging Face" in text and "12 layers × 3 × 768" in text
    page.resize(1280, 820)
    page.grab().save(str(tmp_path / "config_qkv.png"))
