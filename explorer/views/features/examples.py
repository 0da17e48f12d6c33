"""The selected feature's examples (issue 39): its strongest contexts first, then — once the dashboard
arrives — SAEDashboard's groups (top activations, equal-width activation intervals from the highest
down, a random draw over every token where it fires), each line one window of held-out text, shaded by
activation on one scale for all groups. The context around each picked token is adjustable."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QTextBrowser, QVBoxLayout, QWidget

from explorer.views.features.contexts import contexts_csv, contexts_html, groups_csv, groups_html

CONTEXT_MAX = 64  # tokens either side: more than a line can show
DEFAULT_CONTEXT = (12, 3)


class ExampleView(QWidget):
    """Passive: `set_contexts` (ungrouped, strongest first) or `set_groups` in; `contextChanged(before,
    after)` out when the user changes the context width."""

    contextChanged = Signal(int, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.contexts: list = []  # (tokens, acts): the detail's top contexts, until the groups come
        self.groups: list = []  # (heading, [(tokens, acts, picked)])
        self.before, self.after = QSpinBox(), QSpinBox()
        for box, value, suffix, tip in ((self.before, DEFAULT_CONTEXT[0], " before", "tokens shown before each picked token"),
                                        (self.after, DEFAULT_CONTEXT[1], " after", "tokens shown after it")):
            box.setRange(0, CONTEXT_MAX)
            box.setValue(value)
            box.setSuffix(suffix)
            box.setToolTip(f"Context width: {tip} (within its own sequence of the held-out text)")
            box.setKeyboardTracking(False)  # typing "24" asks once, not for 2 and then 24
            box.valueChanged.connect(self._on_context)
        self.browser = QTextBrowser()
        self.browser.setLineWrapMode(QTextBrowser.LineWrapMode.NoWrap)
        self.browser.setOpenLinks(False)
        self.browser.setToolTip("Windows of held-out text where this feature fires: the strongest, then a few drawn "
                                "at random from each activation interval and from every token where it fires. The "
                                "number is the picked (bold) token's activation; shades share one scale")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("context"))
        row.addWidget(self.before)
        row.addWidget(self.after)
        row.addStretch(1)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 2, 0, 0)
        box.setSpacing(2)
        box.addLayout(row)
        box.addWidget(self.browser, 1)

    def context(self) -> tuple[int, int]:
        return int(self.before.value()), int(self.after.value())

    def set_contexts(self, contexts: list) -> None:
        html = contexts_html(list(contexts), self._base())  # checked before anything on screen changes
        self.contexts, self.groups = list(contexts), []
        self.browser.setHtml(html)

    def set_groups(self, groups: list) -> None:
        groups = [(str(name), [(list(t), a, int(q)) for t, a, q in examples]) for name, examples in groups]
        html = groups_html(groups, self._base())
        self.groups = groups
        self.browser.setHtml(html)

    def clear(self) -> None:
        self.contexts, self.groups = [], []
        self.browser.clear()

    def csv(self, feature: int | None) -> str:
        """What is shown: the groups when there are some, else the top contexts."""
        return groups_csv(feature, self.groups) if self.groups else contexts_csv(feature, self.contexts)

    def _on_context(self, _value: int) -> None:
        self.contextChanged.emit(*self.context())

    def _base(self) -> tuple:
        base = self.browser.palette().color(QPalette.ColorRole.Base)
        return base.red(), base.green(), base.blue()
