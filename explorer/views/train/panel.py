"""The Train panel: train a GPT in a child process (or follow a run folder) and watch it learn.

Passive view (no torch, no gptcore): the settings form on the left (form.py), on the right the
run's progress, the step scrubber, the live charts (charts.py) and the latest sample. What the
controller (explorer/controllers/train.py) may call and hear is `TrainView` in
explorer/views/train/protocol.py; the view only says what the user asked for:
- the form's `startRequested(dict)`, `pauseRequested`, `resumeRequested`, `stopRequested`,
  `openRunRequested`, `presetRequested(str)`, `browseRequested(str)`, `corpusChanged(str)`,
  `modelFromSessionRequested` (passed on here: the controller never touches the form);
- `stepChosen(scheme, step)` when the scrubber stops on a kept step, `latestRequested()` for "latest",
  `useModelRequested()` / `saveRequested(kind)` for the final model, `censusSchemeChanged(str)`.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QProgressBar, QPushButton,
                               QScrollArea, QSlider, QSplitter, QToolButton, QVBoxLayout, QWidget)

from explorer.widgets.elided_label import ElidedLabel
from explorer.views.train.charts import TrainCharts
from explorer.views.train.form import TrainForm


class TrainPanel(QWidget):
    """In: the setters below (form values, running state, progress, steps, charts). Out: the signals."""

    # the form's intents, passed on (the controller never reaches into the form)
    startRequested = Signal(dict)  # every setting (see form_values())
    pauseRequested = Signal()
    resumeRequested = Signal()
    stopRequested = Signal()
    openRunRequested = Signal()
    presetRequested = Signal(str)  # "cpu" or "nanogpt"
    browseRequested = Signal(str)  # "file" or "folder"
    corpusChanged = Signal(str)  # "pydoc", "file", "folder" or "induction"
    modelFromSessionRequested = Signal()
    censusSchemeChanged = Signal(str)  # the init scheme whose grad norms and census are shown
    stepChosen = Signal(str, int)  # (scheme, step): make that step's weights the session's model
    latestRequested = Signal()
    useModelRequested = Signal()
    saveRequested = Signal(str)  # "ckpt" (nanoGPT's ckpt.pt, copied) or "hf" (a Hugging Face GPT-2 folder)

    def __init__(self, schemes=(), parent: QWidget | None = None):
        super().__init__(parent)
        self._steps: list[int] = []
        self._scheme = ""  # the init scheme whose kept steps the scrubber holds
        self._shown_text = ""  # what the session shows ("step 1,200 shown"); "" = the kept-steps count
        split = QSplitter(Qt.Orientation.Horizontal)
        self.form = TrainForm(schemes)
        self.form.setMinimumWidth(300)
        for name in ("startRequested", "pauseRequested", "resumeRequested", "stopRequested", "openRunRequested",
                     "presetRequested", "browseRequested", "corpusChanged", "modelFromSessionRequested"):
            getattr(self.form, name).connect(getattr(self, name))
        split.addWidget(self.form)
        right = QWidget()
        box = QVBoxLayout(right)
        box.setContentsMargins(6, 0, 0, 0)
        self._build_status(box)
        box.addLayout(self._build_scrubber())
        self._build_charts(box)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([300, 1100])  # the form at its least: at 900 px the charts then scroll down only, not across
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(split)
        self.set_run_loaded(False)

    def _build_status(self, box: QVBoxLayout) -> None:
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
        self.note_label = QLabel("")  # what the run folder lacks (a missing trace): not an error
        self.note_label.setObjectName("secondaryText")
        self.note_label.setWordWrap(True)
        self.note_label.hide()
        box.addWidget(self.note_label)

    def _build_scrubber(self) -> QHBoxLayout:
        scrub = QHBoxLayout()
        scrub_label = QLabel("Step:")
        scrub_label.setToolTip("The step whose weights every other panel shows")
        scrub.addWidget(scrub_label)
        self.step_slider = QSlider(Qt.Orientation.Horizontal)
        self.step_slider.setToolTip("The kept weights of each step: the chosen step's model becomes the session's, "
                                    "so Attention, Residual, Generation and Attribution show it as it was then")
        self.step_slider.setEnabled(False)
        self.step_slider.setMinimumWidth(60)  # at 900 px the step's label needs the room more (issue 39)
        self.step_slider.valueChanged.connect(self._slider_moved)
        scrub.addWidget(self.step_slider, 1)
        self.step_label = ElidedLabel("—")  # never cut mid-word: its first part always shows, the rest elides
        scrub.addWidget(self.step_label)
        self.latest_box = QCheckBox("latest")
        self.latest_box.setToolTip("Follow the run: show each newly kept step as it arrives")
        self.latest_box.setChecked(True)
        self.latest_box.toggled.connect(self._latest_toggled)
        scrub.addWidget(self.latest_box)
        self.use_button = QPushButton("Use this model")
        self.use_button.setToolTip("Make the run's final (or latest) model the session's model")
        self.use_button.clicked.connect(self.useModelRequested)
        scrub.addWidget(self.use_button)
        self.save_button = QToolButton()
        self.save_button.setText("Save…")
        self.save_button.setToolTip("Save the run's latest model: nanoGPT's ckpt.pt, or a Hugging Face GPT-2 folder")
        self.save_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.save_button)
        menu.addAction("nanoGPT ckpt.pt…", lambda: self.saveRequested.emit("ckpt"))
        menu.addAction("Hugging Face GPT-2 folder…", lambda: self.saveRequested.emit("hf"))
        self.save_button.setMenu(menu)
        scrub.addWidget(self.save_button)
        return scrub

    def _build_charts(self, box: QVBoxLayout) -> None:
        self.charts = TrainCharts()
        self.charts.setMinimumSize(540, 400)  # below this the charts scroll instead of squeezing unreadably
        self.charts.censusSchemeChanged.connect(self.censusSchemeChanged)
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

    # -- the form ------------------------------------------------------------------------------------
    def form_values(self) -> dict:
        return self.form.values()

    def set_form_values(self, values: dict) -> None:
        self.form.set_values(values)

    def set_corpora(self, available: dict[str, bool]) -> None:
        self.form.set_corpora(available)

    def set_corpus(self, kind: str, path: str) -> None:
        self.form.set_corpus_path(kind, path)

    def set_running(self, running: bool, paused: bool = False) -> None:
        self.form.set_running(running, paused)

    # -- the charts ----------------------------------------------------------------------------------
    def shown_scheme(self) -> str:
        return self.charts.shown_scheme()

    def set_run_charts(self, schemes, losses: dict, icl: dict) -> None:
        """Every scheme's loss ({scheme: (train steps, train loss, eval steps, val)}) and ICL score."""
        self.charts.set_schemes(schemes)
        self.charts.set_losses(losses)
        self.charts.set_icl(icl)

    def set_scheme_charts(self, steps, lr, grad_norms: dict, census_steps, census: dict,
                          at_step: int | None = None) -> None:
        """The shown scheme's learning rate, gradient norms per part and head census over probes (at the
        probe of `at_step`, the step every panel shows, when it changes)."""
        self.charts.set_lr(steps, lr)
        self.charts.set_grad_norms(steps, grad_norms)
        self.charts.set_census(census_steps, census, at_step)

    # -- in --------------------------------------------------------------------------------------------
    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def set_message(self, text: str) -> None:
        """A problem with the run (red, above the charts); '' hides it. What is drawn stays."""
        self.message_label.setText(text)
        self.message_label.setVisible(bool(text))

    def set_note(self, text: str) -> None:
        """What the run folder lacks (grey, above the charts); '' hides it."""
        self.note_label.setText(text)
        self.note_label.setVisible(bool(text))

    def set_progress(self, done: int, total: int, rate_text: str, state: str = "") -> None:
        """"526 / 2,000 iterations · paused"; a run that never started shows its state alone."""
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(done, max(1, total)))
        word = f" · {state}" if state else ""
        if not done and state in ("refused", "failed", "no run"):
            text = {"refused": "refused: nothing was trained", "failed": "failed: nothing was trained"}.get(state, state)
        else:
            text = f"{done:,} / {total:,} iterations{word}" if total else f"{done:,} iterations{word}"
        self.progress.setFormat(text)
        self.rate_label.setText(rate_text)

    def progress_text(self) -> str:
        return self.progress.format()

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
        """What the session shows now ("step 1,200 shown"), next to the slider; '' = the kept-steps count."""
        self._shown_text = text
        self._show_step_label()

    def follows_latest(self) -> bool:
        """The "latest" box: each newly kept step is to be shown as it arrives."""
        return self.latest_box.isChecked()

    def set_run_loaded(self, loaded: bool) -> None:
        self.use_button.setEnabled(loaded)
        self.save_button.setEnabled(loaded)

    def clear_run(self) -> None:
        """Another run: nothing of the last one stays, and the new one is followed from its latest step."""
        self.latest_box.blockSignals(True)
        self.latest_box.setChecked(True)
        self.latest_box.blockSignals(False)
        self.charts.clear()
        self.set_sample(None, "", "")
        self._shown_text = ""
        self.set_steps([], "")
        self.set_message("")
        self.set_note("")
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
        """The session's step when one is shown, else how many steps are kept (it grows with the run)."""
        n = len(self._steps)
        count = f"{n:,} kept step{'' if n == 1 else 's'}" if n else "— (no kept steps)"
        self.step_label.setText(f"{self._shown_text} ({count})" if self._shown_text and n else
                                self._shown_text or count)
        essential = self._shown_text or count  # "step 500 shown": what the label is for
        self.step_label.setMinimumWidth(self.step_label.fontMetrics().horizontalAdvance(essential + "…") + 4)

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
