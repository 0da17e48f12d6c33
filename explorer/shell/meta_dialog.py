"""Asks for the meta.pkl of a nanoGPT character model whose own was not found.

nanoGPT keeps a char model's characters in data/<dataset>/meta.pkl, not in ckpt.pt; the loader
looks where nanoGPT's sample.py would (gptcore.io.nanogpt_meta). When it is not there, the model
still opens, its tokens shown as ids; this dialog says why and offers to open the file, which is
read without running anything in it (only plain dicts, strings and numbers are accepted).
Non-modal (`open()`), like HeadCountDialog: `chosen(path)` or `rejected` answers.
"""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFileDialog, QLabel, QVBoxLayout, QWidget

META_FILTER = "nanoGPT vocabulary (meta.pkl *.pkl);;All files (*)"


class MetaDialog(QDialog):
    chosen = Signal(str)

    def __init__(self, model_name: str, reason: str, start_folder: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Where is its meta.pkl?")
        self.setObjectName("metaDialog")
        self.start_folder = start_folder
        intro = QLabel(f"<b>{model_name}</b> reads characters, but the file that says which id is which "
                       f"character was not found, so its tokens are shown as numbers.")
        intro.setWordWrap(True)
        self.reason = QLabel(reason)
        self.reason.setWordWrap(True)
        self.reason.setObjectName("readoutNote")
        hint = QLabel("Open the <code>meta.pkl</code> nanoGPT's prepare.py wrote beside its train.bin "
                      "(<code>data/&lt;dataset&gt;/meta.pkl</code>). It is read without running anything in it: "
                      "only plain dicts, strings and numbers are accepted.")
        hint.setWordWrap(True)
        buttons = QDialogButtonBox()
        self.open_button = buttons.addButton("Open meta.pkl…", QDialogButtonBox.ButtonRole.AcceptRole)
        self.ids_button = buttons.addButton("Show token ids", QDialogButtonBox.ButtonRole.RejectRole)
        self.open_button.clicked.connect(self._browse)
        self.ids_button.clicked.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (intro, self.reason, hint):
            layout.addWidget(widget)
        layout.addStretch(1)
        layout.addWidget(buttons)
        self.setMinimumWidth(480)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open nanoGPT's meta.pkl", self.start_folder, META_FILTER)
        if path:
            self.choose(path)

    def choose(self, path: str) -> None:
        """Answer with `path` (what the file dialog returns)."""
        self.done(QDialog.DialogCode.Accepted)
        self.chosen.emit(str(path))
