"""What the Features and Circuits controllers share, said once (split from both along this seam): each
shows the features of a dictionary trained on a corpus (an SAE; a set of transcoders) for a prompt that
follows typing, trains it in the background with progress, an ETA and Cancel, and holds feature edits
as session state.

- The corpus: the built-in text, the run's data (offered for a run's model, and taken in place of the
  built-in text: a run's character model cannot read another alphabet) or a text file chosen with
  Browse…; what a training asked for is kept for the next.
- A training (or the walk over a run's kept steps that follows it) locks the form and shows progress
  with an ETA; the form comes back when the last of the panel's trainings ends.

A mixin of FeaturesController and CircuitsController, which provide `view`, `ctx`, `training_keys` (the
runner keys of their trainings), `browse_title`, `train`, `edit`, `_writer(kind)` and `_export_dialog`;
nothing here is used alone. It asks of the view only what both views' protocols declare
(tests/explorer/test_dictionary_panel.py holds it to that).
"""
from __future__ import annotations

import time

from PySide6.QtWidgets import QFileDialog

from explorer.controllers.live import LiveRequest
from explorer.controllers.train_settings import duration

DEFAULT_PROMPT = "When Mary and John went to the store, John gave a drink to"


class DictionaryPanelPart:
    training_keys: tuple[str, ...] = ()
    browse_title = "A UTF-8 text file"
    _started = 0.0  # when the training (or walk) now shown began: the ETA's clock

    def _set_up_shared(self, start_work, debounce_ms: int) -> None:
        """What both panels start with: the built-in corpus, the prompt followed live (`start_work(done)`
        starts its work: controllers/live.py), the intents both views send connected (Cancel stops every
        training key), and the default prompt."""
        self.corpus, self.corpus_path = "builtin", ""
        self.live = LiveRequest(start_work, debounce_ms, parent=self)
        view = self.view
        for signal, slot in ((view.trainRequested, self.train), (view.cancelRequested, self.cancel),
                             (view.browseRequested, self._browse), (view.editRequested, self.edit),
                             (view.resetEditsRequested, self.reset_edits), (view.exportRequested, self._export_dialog)):
            signal.connect(slot)
        view.promptChanged.connect(lambda _text: self.live.poke())
        view.set_prompt_text(DEFAULT_PROMPT)

    def cancel(self) -> None:
        """Stop the panel's training and its walk over a run's steps (`training_keys`)."""
        for key in self.training_keys:
            self.ctx.runner.cancel(key)

    def set_prompt(self, text: str) -> None:
        if text != self.view.prompt_text():
            self.view.set_prompt_text(text)
            self.live.now()

    # -- the corpus -------------------------------------------------------------------------------------
    def _offer_corpora(self) -> None:
        """The run's data offered for a run's model (and taken in place of the built-in text), not otherwise."""
        run = self.ctx.session.info.run is not None
        self.view.set_corpus_choices(run, self.corpus_path)
        if self.corpus == "run" and not run:
            self.corpus = "builtin"
        elif self.corpus == "builtin" and run:
            self.corpus = "run"  # a run's character model reads its own data

    def _take_corpus(self, settings: dict) -> tuple[str, str]:
        """The corpus a training asked for, kept for the next; (corpus, path) for the task."""
        self.corpus = settings.get("corpus", "builtin")
        self.corpus_path = settings.get("path", "") or self.corpus_path
        return self.corpus, self.corpus_path

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.view, self.browse_title, self.ctx.file_path(""),
                                              "Text (*.txt *.md *.py);;All files (*)")
        if path:
            self.ctx.remember_folder_of(path)
            self.corpus, self.corpus_path = "file", path
            self.view.set_corpus_choices(self.ctx.session.info.run is not None, path)

    # -- training progress ------------------------------------------------------------------------------
    def _start_training(self, total: int, text: str) -> None:
        self._started = time.monotonic()
        self.view.set_training(True)
        self.view.set_progress(0, total, text)

    def _progress(self, done: int, total: int, message: str) -> None:
        elapsed = time.monotonic() - self._started
        left = elapsed * (total - done) / done if 0 < done < total and elapsed > 1 else None
        eta = f" · about {duration(left)} left" if left is not None else ""  # "about 54 min 18 s left"
        self.view.set_progress(done, total, f"{message}{eta}")

    def _training_ended(self) -> None:
        """A training or a walk ended (done, failed or cancelled): the form comes back and the progress
        line goes, unless another of the panel's trainings (the walk the training started) still runs."""
        runner = self.ctx.runner
        if not any(runner.is_running(key) for key in self.training_keys):
            self.view.set_training(False)
            self.view.set_progress(1, 1, "")

    # -- editing (session state) and export ---------------------------------------------------------------
    def reset_edits(self) -> None:
        self.ctx.change_ablation(lambda session: session.interp.set_feature_edits(None, {}), on_error=self._edit_failed)

    def _edit_failed(self, exc: BaseException) -> None:
        self.view.set_error(self.report_error(exc, "Feature edit failed").inline)

    def export(self, kind: str, path: str) -> bool:
        return self.export_to(path, self._writer(kind), self.view.set_error)
