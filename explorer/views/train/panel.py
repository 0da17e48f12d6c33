"""The Train panel: train a GPT in a child process (or follow a run folder) and watch it learn.

Passive view (no torch, no gptcore): the settings form on the left (train_form.py), on the right
the run's progress, the step scrubber, the live charts (train_charts.py) and the latest sample.
The controller (explorer/controllers/train.py) reads the run folder and calls the setters; the
view only says what the user asked for:
- the form's `startRequested(dict)`, `pauseRequested`, `resumeRequested`, `stopRequested`,
  `openRunRequested`, `presetRequested(str)`, `browseRequested(str)`, `modelFromSessionRequested`;
- `stepChosen(scheme, step)` when the scrubber stops on a kept step, `latestRequested()` for "latest",
  `useModelRequested()` / `saveRequested(kind)` for the final model.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QProgressBar, QPushButton,
                               QScrollArea, QSlider, QSplitter, QToolButton, QVBoxLayout, QWidget)

from explorer.widgets.elided_label import ElidedLabel
from explorer.views.train.charts import TrainCharts
from explorer.views.train.form import TrainForm


class TrainPanel(QWidget):
    stepChosen = Signal(str, int)  # (scheme, step): make that step's weights the session's model
    latestRequested = Signal()
    useModelRequested = Signal()
    saveRequested = Signal(str)  # "ckpt" (nanoGPT's ckpt.pt, copied) or "hf" (a Hugging Face GPT-2 folder)

    def __init__(self, schemes=(), parent: QWidget | None = None):
        super().__init__(parent)
        self._steps: list[int] = []
        self._scheme = ""  # the init scheme whose kept steps the scrubber holds
        split = QSplitter(Qt.Orientation.Horizontal)
        self.form = TrainForm(schemes)
        self.form.setMinimumWidth(300)
        split.addWidget(self.form)

        right = QWidget()
        box = QVBoxLayout(right)
        box.setContentsMargins(6, 0, 0, 0)
        top = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("no run")
        self.progress.setTextVisible(True)
        self.rate_label = QLabel("")
        self.rate_label.setObjectName("secondaryText")
        top.addWidget(self.progress, 2)
        top.addWidget(self.rate_label, 1)
        box.addLayout(top)
        self.status_label = ElidedLabel("Start a run, or open a run folder (one started here, in a terminal, or on "
                                        "a cluster).")
        self.status_label.setObjectName("secondaryText")
        box.addWidget(self.status_label)
        self.message_label = QLabel("")
        self.message_label.setObjectName("errorText")
        self.message_label.setWordWrap(True)
        self.message_label.setStyleSheet("color: #dc2626;")
        self.message_label.hide()
        box.addWidget(self.message_label)

        scrub = QHBoxLayout()
        scrub_label = QLabel("Step:")
        scrub_label.setToolTip("The step whose weights every other panel shows")
        scrub.addWidget(scrub_label)
        self.step_slider = QSlider(Qt.Orientation.Horizontal)
        self.step_slider.setToolTip("The kept weights of each step: the chosen step's model becomes the session's, "
                                    "so Attention, Residual, Generation and Attribution show it as it was then")
        self.step_slider.setEnabled(False)
        self.step_slider.setMinimumWidth(140)
        self.step_slider.valueChanged.connect(self._slider_moved)
        self.step_label = QLabel("—")
        self.step_label.setMinimumWidth(120)
        self.latest_box = QCheckBox("latest")
        self.latest_box.setToolTip("Follow the run: show each newly kept step as it arrives")
        self.latest_box.setChecked(True)
        self.latest_box.toggled.connect(self._latest_toggled)
        self.use_button = QPushButton("Use this model")
        self.use_button.setToolTip("Make the run's final (or latest) model the session's model")
        self.use_button.clicked.connect(self.useModelRequested)
        self.save_button = QToolButton()
        self.save_button.setText("Save…")
        self.save_button.setToolTip("Save the run's latest model: nanoGPT's ckpt.pt, or a Hugging Face GPT-2 folder")
        self.save_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.save_button)
        menu.addAction("nanoGPT ckpt.pt…", lambda: self.saveRequested.emit("ckpt"))
        menu.addAction("Hugging Face GPT-2 folder…", lambda: self.saveRequested.emit("hf"))
        self.save_button.setMenu(menu)
        for w in (self.step_slider,):
            scrub.addWidget(w, 1)
        scrub.addWidget(self.step_label)
        scrub.addWidget(self.latest_box)
        scrub.addWidget(self.use_button)
        scrub.addWidget(self.save_button)
        box.addLayout(scrub)

        self.charts = TrainCharts()
        self.charts.setMinimumSize(540, 400)  # below this the charts scroll instead of squeezing unreadably
        charts_scroll = self.charts_scroll = QScrollArea()
        charts_scroll.setWidgetResizable(True)
        charts_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        charts_scroll.setWidget(self.charts)
        box.addWidget(charts_scroll, 1)
        self.sample_label = QLabel("sample at the latest probe")
        self.sample_label.setObjectName("secondaryText")
        box.addWidget(self.sample_label)
        self.sample_text = QPlainTextEdit()
        self.sample_text.setReadOnly(True)
        self.sample_text.setMaximumHeight(64)
        self.sample_text.setPlaceholderText("the model's text appears here at each probe")
        box.addWidget(self.sample_text)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([300, 1100])  # the form at its least: at 900 px the charts then scroll down only, not across
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(split)
        self.set_run_loaded(False)

    # -- in --------------------------------------------------------------------------------------------
    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_message(self, text: str) -> None:
        """A problem with the run (red, above the charts); '' hides it. What is drawn stays."""
        self.message_label.setText(text)
        self.message_label.setVisible(bool(text))

    def set_progress(self, done: int, total: int, rate_text: str, state: str = "") -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(done, max(1, total)))
        word = f" · {state}" if state else ""
        self.progress.setFormat(f"{done:,} / {total:,} iterations{word}" if total else f"{done:,} iterations{word}")
        self.rate_label.setText(rate_text)

    def set_sample(self, step: int | None, prompt: str, text: str) -> None:
        if step is None:
            self.sample_label.setText("sample at the latest probe")
            self.sample_text.setPlainText("")
            return
        self.sample_label.setText(f"sample at step {step:,} (prompt {prompt!r}, temperature 0.8, fixed seed)")
        self.sample_text.setPlainText(prompt + text)

    def set_steps(self, steps, scheme: str) -> None:
        """The kept steps of `scheme` (the scrubber's stops); on "latest" the slider moves to the end."""
        self._scheme = scheme
        self._steps = [int(s) for s in steps]
        self.step_slider.blockSignals(True)
        self.step_slider.setRange(0, max(0, len(self._steps) - 1))
        if self.latest_box.isChecked():
            self.step_slider.setValue(self.step_slider.maximum())
        self.step_slider.blockSignals(False)
        self.step_slider.setEnabled(bool(self._steps))
        self._show_step_label()

    def set_shown_step(self, text: str) -> None:
        """What the session shows now ("step 1,200 · val 1.63"), next to the slider."""
        self.step_label.setText(text)

    def set_run_loaded(self, loaded: bool) -> None:
        self.use_button.setEnabled(loaded)
        self.save_button.setEnabled(loaded)

    def clear_run(self) -> None:
        self.charts.clear()
        self.set_sample(None, "", "")
        self.set_steps([], "")
        self.set_message("")
        self.set_progress(0, 0, "")
        self.set_run_loaded(False)

    # -- out -------------------------------------------------------------------------------------------
    def selected_step(self) -> int | None:
        i = self.step_slider.value()
        return self._steps[i] if 0 <= i < len(self._steps) else None

    def choose_step(self, step: int) -> None:
        """Move the scrubber to `step` (as a user would); it leaves "latest"."""
        if step in self._steps:
            self.latest_box.blockSignals(True)
            self.latest_box.setChecked(False)
            self.latest_box.blockSignals(False)
            self.step_slider.blockSignals(True)
            self.step_slider.setValue(self._steps.index(step))
            self.step_slider.blockSignals(False)
            self._slider_moved()

    def _show_step_label(self) -> None:
        if not self._steps:
            self.step_label.setText("— (no kept steps)")
        elif self.step_label.text().startswith("—"):
            self.step_label.setText(f"{len(self._steps)} kept steps")

    def _slider_moved(self, *_args) -> None:
        step = self.selected_step()
        if step is None:
            return
        if self.step_slider.value() < self.step_slider.maximum() and self.latest_box.isChecked():
            self.latest_box.blockSignals(True)
            self.latest_box.setChecked(False)  # the user went back: stop following
            self.latest_box.blockSignals(False)
        self.stepChosen.emit(self._scheme, step)

    def _latest_toggled(self, on: bool) -> None:
        if on:
            self.step_slider.blockSignals(True)
            self.step_slider.setValue(self.step_slider.maximum())
            self.step_slider.blockSignals(False)
            self.latestRequested.emit()
