"""Residual-stream panel: passive view, controller in a worker, exports, screenshot mode."""
from __future__ import annotations

import csv

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtGui import QImage

from explorer.controllers import residual as residual_controller
from explorer.controllers.base import PanelPage
from explorer.controllers.residual import ResidualController
from explorer.views.residual.panel import ResidualPanel
from explorer.controllers.context import PanelContext
from explorer.shell.registry import find_panel
from explorer.session.core import ModelInfo, Session
from gptcore.model.init import INIT_SCHEMES
from gptcore.model.gpt import GPT
import gptcore.interp.probes.residual as residual_probe
from gptcore.interp.probes.residual import model_residual_norms, residual_norms

# Tiny models: a second OpenMP thread only adds spin-waiting on a shared machine.
pytestmark = pytest.mark.usefixtures("single_torch_thread")


def small_view(qtbot, ctx, **shape) -> PanelPage:
    view = PanelPage(ctx, ResidualController, autorun=False)
    qtbot.addWidget(view)
    p = view.view
    p.set_shape(shape.get("n_layer", 2), shape.get("n_embd", 64), shape.get("n_head", 4))
    p.batch_box.setValue(2)
    p.length_box.setValue(8)
    p.seeds_box.setValue(shape.get("seeds", 2))
    return view


def run_and_wait(qtbot, view: PanelPage, timeout=60_000):
    with qtbot.waitSignal(view.controller.drawn, timeout=timeout) as blocker:
        view.view.run_button.click()
    qtbot.waitUntil(lambda: not view.controller.ctx.runner.busy, timeout=timeout)
    return blocker.args[1]


def synthetic(schemes, k=3, p=9):
    rng = np.random.default_rng(0)
    base = np.linspace(1, 5, p)
    return np.stack([[base * (1 + s) * (1 + 0.05 * rng.standard_normal()) for _ in range(k)]
                     for s in range(len(schemes))])


def test_one_curve_per_enabled_scheme(qtbot):
    panel = ResidualPanel(INIT_SCHEMES)
    qtbot.addWidget(panel)
    panel.set_curves("norms", np.arange(9) / 2, INIT_SCHEMES, synthetic(INIT_SCHEMES))
    assert panel.curve_names() == list(INIT_SCHEMES)
    assert len(panel.legend.items) == len(INIT_SCHEMES)
    panel.scheme_boxes["xavier-normal"].setChecked(False)
    assert panel.curve_names() == [s for s in INIT_SCHEMES if s != "xavier-normal"]
    assert len(panel.legend.items) == len(INIT_SCHEMES) - 1
    assert "xavier-normal" not in panel.caption.text()
    assert panel.settings()["schemes"] == tuple(s for s in INIT_SCHEMES if s != "xavier-normal")
    panel.scheme_boxes["xavier-normal"].setChecked(True)
    assert len(panel.curve_names()) == len(INIT_SCHEMES)


def test_spread_is_drawn_as_a_band_and_log_y_keeps_it(qtbot):
    import pyqtgraph as pg

    panel = ResidualPanel(("gpt2", "gpt2-unscaled"))
    qtbot.addWidget(panel)
    values = synthetic(("gpt2", "gpt2-unscaled"))
    panel.set_curves("norms", np.arange(9) / 2, ("gpt2", "gpt2-unscaled"), values)
    bands = [i for i in panel.plot.items_drawn if isinstance(i, pg.FillBetweenItem)]
    assert len(bands) == 2
    lo, hi = bands[1].curves  # gpt2-unscaled's band: min and max over the seeds
    np.testing.assert_allclose(lo.getData()[1], values[1].min(axis=0))
    np.testing.assert_allclose(hi.getData()[1], values[1].max(axis=0))
    panel.log_box.setChecked(True)
    lo, hi = [i for i in panel.plot.items_drawn if isinstance(i, pg.FillBetweenItem)][1].curves
    np.testing.assert_allclose(hi.getData()[1], np.log10(values[1].max(axis=0)))
    assert panel.plot.getAxis("left").logMode


def test_view_measures_in_a_worker_and_draws_what_the_session_computes(qtbot, panel_context):
    view = small_view(qtbot, panel_context)
    with qtbot.waitSignal(view.dataReady, timeout=60_000):
        result = run_and_wait(qtbot, view)
    assert view.is_ready and view.view.curve_names() == list(INIT_SCHEMES)
    want = residual_norms(result.curves.config, seeds=(0, 1), batch=2, length=8)
    np.testing.assert_allclose(result.curves.values, want.values)
    assert result.curves.config["n_layer"] == 2 and result.reference is None  # tiny session is untrained
    assert "12 runs (6 schemes × 2 seeds" in view.view.status.text()
    assert "Growth from embedding" in view.view.caption.text()


def test_gradient_view_with_residuals_switched_off(qtbot, panel_context):
    view = small_view(qtbot, panel_context, n_layer=3)
    view.view.residual_box.setChecked(False)
    for name in INIT_SCHEMES[2:]:
        view.view.scheme_boxes[name].setChecked(False)
    with qtbot.waitSignal(view.controller.drawn, timeout=60_000) as blocker:
        view.view.set_view("gradients")  # a view without data runs by itself
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)
    result = blocker.args[1]
    assert blocker.args[0] == "gradients" and result.curves.quantity == "grad-params"
    assert result.curves.config["residual"] is False and result.curves.values.shape == (2, 2, 3)
    assert view.view.curve_names() == ["gpt2", "gpt2-unscaled"]
    assert "WITHOUT residual" in view.view.plot.getPlotItem().titleLabel.text
    assert not view.view.metric_box.isEnabled() and view.view.quantity_box.isEnabled()


def test_comparison_draws_the_other_residual_setting_dashed(qtbot, panel_context, tmp_path):
    import pyqtgraph as pg
    from PySide6.QtCore import Qt

    view = small_view(qtbot, panel_context, n_layer=3, seeds=1)
    for name in INIT_SCHEMES[1:]:
        view.view.scheme_boxes[name].setChecked(False)
    view.view.compare_box.setChecked(True)
    view.view.set_view("gradients")
    qtbot.waitUntil(lambda: "gradients" in view.controller.results, timeout=60_000)
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)
    data = view.view._data["gradients"]
    cfg = view.controller.results["gradients"].curves.config
    want = panel_context.session.residual.gradients(
        config=dict(cfg, residual=False), schemes=("gpt2",), seeds=(0,), batch=2, length=8).curves.values
    np.testing.assert_allclose(data["comparison"], want)
    assert cfg["residual"] is True and not np.allclose(data["values"], want)
    dashed = [i for i in view.view.plot.items_drawn if isinstance(i, pg.PlotDataItem)
              and i.getData()[0] is not None and len(i.getData()[0]) and pg_pen_style(i) == Qt.PenStyle.DashLine]
    assert len(dashed) == 1  # gpt2's no-residual curve
    assert view.view.curve_names() == ["gpt2"]
    assert "Dashed</b> (without residual connections): gpt2" in view.view.caption.text()
    view.controller.export("csv", str(tmp_path / "g.csv"))
    schemes = {row["scheme"] for row in csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8"))}
    assert schemes == {"gpt2", "gpt2 (without residual connections)"}


def pg_pen_style(item):
    import pyqtgraph as pg

    return pg.mkPen(item.opts["pen"]).style()


def test_cancel_stops_within_one_step(qtbot, panel_context, monkeypatch):
    steps = []
    real_init = residual_probe.init_weights

    def counting_init(model, scheme, seed):  # the real initialiser, counted
        steps.append((scheme, seed))
        return real_init(model, scheme, seed)

    monkeypatch.setattr(residual_probe, "init_weights", counting_init)
    view = small_view(qtbot, panel_context, n_layer=6, n_embd=128, seeds=5)
    view.view.run_button.click()
    qtbot.waitUntil(lambda: view.view.progress.value() >= 1, timeout=60_000)
    assert view.view.cancel_button.isEnabled()
    view.view.cancel_button.click()
    started_at_cancel = len(steps)
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)
    assert len(steps) - started_at_cancel <= 1  # at most the step already under way
    assert len(steps) < len(INIT_SCHEMES) * 5
    assert not view.controller.results and view.view.run_button.isEnabled()
    assert "Cancelled" in view.view.status.text()


def test_trained_model_curve_is_overlaid_and_follows_model_swaps(qtbot, runner):
    model = GPT(Session.tiny().model.config, init="gpt2", seed=7).eval()
    info = ModelInfo(name="tiny-trained", trained=True, source="test", config=model.config.to_dict(), n_params=1)
    session = Session(model, info)
    view = small_view(qtbot, PanelContext(session=session, runner=runner))
    run_and_wait(qtbot, view)  # the sweep, then the loaded model's own curve (a task of its own)
    qtbot.waitUntil(lambda: view.controller.reference is not None, timeout=60_000)
    want = model_residual_norms(model, batch=2, length=8, seed=0)
    np.testing.assert_allclose(view.controller.reference.y, want)
    assert view.view.curve_names()[-1] == "tiny-trained (trained)"
    session.build(model.config.to_dict(), "gpt2", seed=1)  # an untrained model replaces it (the panel follows)
    qtbot.waitUntil(lambda: not runner.busy, timeout=10_000)
    assert not any("trained" in n for n in view.view.curve_names())


def test_a_model_of_unknown_provenance_is_not_called_trained(qtbot, runner, tmp_path):
    """Issue 27: the book's model.pth (weights of unknown provenance, maybe never trained) was drawn
    as "model.pth (trained, as loaded)"; its curve is drawn, named for what is known, in the CSV too."""
    model = GPT(Session.tiny().model.config, init="gpt2", seed=7).eval()
    info = ModelInfo(name="model.pth", trained=False, status="loaded", source="test",
                     config=model.config.to_dict(), n_params=1)
    session = Session(model, info)
    view = small_view(qtbot, PanelContext(session=session, runner=runner))
    run_and_wait(qtbot, view)
    qtbot.waitUntil(lambda: view.controller.reference is not None, timeout=60_000)
    name = view.view.curve_names()[-1]
    assert name == residual_controller.reference_label("model.pth", "loaded") and "trained)" not in name
    assert name.startswith("model.pth (as loaded")
    path = tmp_path / "norms.csv"
    view.view.export_csv(str(path))
    with open(path, newline="", encoding="utf-8") as fh:
        names = {row["scheme"] for row in csv.DictReader(fh)}
    assert name in names and not any("(trained)" in n for n in names)


def test_exports_csv_png_svg(qtbot, panel_context, tmp_path):
    view = small_view(qtbot, panel_context)
    result = run_and_wait(qtbot, view)
    for kind in ("csv", "png", "svg"):
        view.controller.export(kind, str(tmp_path / f"curves.{kind}"))
    rows = list(csv.DictReader(open(tmp_path / "curves.csv", encoding="utf-8")))
    assert len(rows) == len(INIT_SCHEMES) * 5
    first = rows[0]
    assert first["scheme"] == "gpt2" and first["label"] == "embed"
    assert float(first["mean"]) == pytest.approx(result.curves.mean[0, 0])
    assert float(first["max"]) == pytest.approx(result.curves.high[0, 0])
    image = QImage(str(tmp_path / "curves.png"))
    assert not image.isNull() and image.width() >= 1200
    svg = (tmp_path / "curves.svg").read_text(encoding="utf-8")
    assert "<svg" in svg and "gpt2-unscaled" in svg


def test_a_setting_that_cannot_be_built_is_explained_not_raised(qtbot, panel_context):
    view = small_view(qtbot, panel_context, n_embd=100, n_head=3)
    view.view.run_button.click()
    qtbot.waitUntil(lambda: "⚠" in view.view.status.text(), timeout=10_000)
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=10_000)
    assert "n_head" in view.view.status.text() and "divisible" in view.view.status.text()
    assert view.view.run_button.isEnabled()


def test_registry_builds_the_residual_view(qtbot, panel_context, monkeypatch):
    monkeypatch.setattr(residual_controller, "START_SHAPE", (2, 64, 4))
    widget = find_panel("residual").build(panel_context)
    qtbot.addWidget(widget)
    assert isinstance(widget.controller, ResidualController)
    widget.view.seeds_box.setValue(1)
    widget.view.length_box.setValue(8)
    qtbot.waitUntil(lambda: widget.is_ready, timeout=60_000)  # it starts measuring by itself
    qtbot.waitUntil(lambda: not panel_context.runner.busy, timeout=60_000)


def test_screenshot_mode_renders_the_residual_panel(tmp_path, hf_checkpoint, run_screenshot):
    folder = hf_checkpoint()
    out = tmp_path / "shot.png"
    proc = run_screenshot(out, "residual", "1100x750", "--model", str(folder), "--device", "cpu", OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = QImage(str(out))
    assert not img.isNull() and (img.width(), img.height()) == (1100, 750)
    colours = {img.pixel(x, y) for x in range(0, 1100, 9) for y in range(0, 750, 9)}
    assert len(colours) > 20


def test_rmsnorm_curves_are_measured_on_rmsnorm_models(qtbot, panel_context, monkeypatch):
    """The Norm choice reaches the random models the sweep builds (LayerNorm vs RMSNorm curves)."""
    import gptcore.interp.probes.residual as probe

    built = []
    real = probe.residual_norms

    def spy(config, *args, **kwargs):
        built.append(config.norm)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(probe, "residual_norms", spy)
    view = small_view(qtbot, panel_context, seeds=1)
    layer_norm = run_and_wait(qtbot, view).curves.values
    view.view.norm_box.setCurrentIndex(1)
    assert "norm changed" in view.view.stale_reason()
    rms = run_and_wait(qtbot, view).curves.values
    assert built == ["layernorm", "rmsnorm"]
    assert "pre-RMSNorm" in view.view.plot.getPlotItem().titleLabel.text and view.view.stale_reason() == ""
    assert not np.allclose(layer_norm, rms)


@pytest.mark.parametrize("size", [(860, 520), (1340, 820)])  # the panel in a 900×600 and a 1400×900 window
def test_the_legend_never_covers_a_curve(qtbot, size):
    """Issue 27: at 900×600 the three legend rows covered the top curves (the room kept for them was
    a share of the data's span, whatever the plot's height); every point now lies below the legend,
    and a model file's long name takes a column away instead of pushing the last one out of view."""
    from PySide6.QtCore import QPointF

    panel = ResidualPanel(INIT_SCHEMES)
    qtbot.addWidget(panel)
    panel.resize(*size)
    panel.show()
    panel.set_log_y(True)
    x = np.arange(9) / 2
    panel.set_curves("norms", x, INIT_SCHEMES, synthetic(INIT_SCHEMES))
    name = residual_controller.reference_label("model.pth", "loaded")  # a third legend row, and long
    panel.set_reference(x, np.linspace(1, 3, 9), name)
    qtbot.wait(100)
    plot = panel.plot
    legend = plot.legend.sceneBoundingRect()
    assert len(plot.legend.items) == len(INIT_SCHEMES) + 1 and legend.height() > 40
    vb = plot.getViewBox()
    assert vb.sceneBoundingRect().left() <= legend.left() and legend.right() <= vb.sceneBoundingRect().right()
    for item in plot.items_drawn:
        if isinstance(item, pg.PlotDataItem) and item.name():
            xs, ys = item.getData()
            top = min(vb.mapViewToScene(QPointF(float(a), float(b))).y() for a, b in zip(xs, ys) if np.isfinite(b))
            assert top > legend.bottom(), item.name()  # its highest point (scene y grows downwards) is below the legend
