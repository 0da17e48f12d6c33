"""The prompt as the tokenizer split it: one rounded chip per token, whitespace made visible.

Painted by one widget (a flow layout computed from font metrics), not one QLabel per token:
a 1024-token prompt would otherwise mean 1024 widgets re-laid out on every keystroke.
Chips can be tinted by a weight per token (the zoomed head's attention from one query),
which turns the prompt itself into a bertviz-style view of where that query looks.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from explorer.widgets.token_stream import visible_token

PAD_X, PAD_Y, GAP, MAX_CHARS = 5, 2, 4, 24
TINT = QColor(249, 115, 22)  # orange: reads on light and dark backgrounds
FOCUS = QColor("#22d3ee")


class TextWidths:
    """horizontalAdvance per label, remembered per font: a keystroke re-lays out up to 1024
    chips, nearly all of them unchanged, and asking Qt for each width again costs ~10 ms."""

    LIMIT = 20000

    def __init__(self):
        self._font_key, self._known = None, {}

    def __call__(self, fm: QFontMetrics, labels: list[str]) -> list[float]:
        key = (fm.height(), fm.averageCharWidth(), fm.ascent())
        if key != self._font_key or len(self._known) > self.LIMIT:
            self._font_key, self._known = key, {}
        known = self._known
        out = []
        for s in labels:
            w = known.get(s)
            if w is None:
                w = known[s] = fm.horizontalAdvance(s)
            out.append(w)
        return out


class TokenChips(QWidget):
    """Passive view. In: `set_tokens`, `set_weights`, `set_focus_index`. Out: `tokenHovered(i)`
    (-1 when the mouse leaves every chip)."""

    tokenHovered = Signal(int)

    def __init__(self, parent: QWidget | None = None, max_lines: int = 6):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self._labels: list[str] = []
        self._weights: np.ndarray | None = None
        self._focus = -1
        self._rects: list[QRectF | None] = []  # None for the hidden head of a long prompt
        self._max_lines = max_lines
        self._hidden = 0  # tokens not drawn because they did not fit max_lines
        self._widths = TextWidths()

    # -- data in ---------------------------------------------------------------------------
    def set_tokens(self, tokens: list[str]) -> None:
        labels = [visible_token(t) for t in tokens]
        labels = [s if len(s) <= MAX_CHARS else s[:MAX_CHARS - 1] + "…" for s in labels]
        self._weights = None
        self._focus = -1
        if labels == self._labels:  # same prompt (another head, a new result): layout stands
            self.update()
            return
        self._labels = labels
        self._relayout()

    def set_weights(self, weights: np.ndarray | None, focus: int = -1) -> None:
        """Tint chip i by weights[i] in [0, 1] (None clears); outline chip `focus`."""
        self._weights = None if weights is None else np.asarray(weights, dtype=float)
        self._focus = focus
        self.update()

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    # -- layout ----------------------------------------------------------------------------
    def _relayout(self) -> None:
        """Flow the chips into lines; past max_lines keep the tail (what the last query sees).
        Positions are plain floats until the end: only the chips drawn get a QRectF, so a
        1024-token prompt costs a few hundred additions, not a thousand Qt objects."""
        fm = QFontMetrics(self.font())
        h = fm.height() + 2 * PAD_Y
        width = max(self.width(), 200)
        widths = [w + 2 * PAD_X for w in self._widths(fm, self._labels)]
        lines, x = 1, 0.0
        for w in widths:
            if x > 0 and x + w > width:
                x, lines = 0.0, lines + 1
            x += w + GAP
        keep_from, x0 = 0, 0.0
        if lines > self._max_lines:  # keep the tail, re-flowed from the top after a "… n earlier" chip
            used, x = 1, 0.0
            keep_from = len(widths)
            for i in range(len(widths) - 1, -1, -1):
                if x > 0 and x + widths[i] > width:
                    used, x = used + 1, 0.0
                    if used > self._max_lines - 1:  # one line reserved for the "… n more" chip
                        break
                x += widths[i] + GAP
                keep_from = i
            x0 = fm.horizontalAdvance(f"… {keep_from} earlier tokens") + 2 * PAD_X + GAP
        self._hidden = keep_from
        rects: list[QRectF | None] = [None] * keep_from
        x, y = x0, 0.0
        for w in widths[keep_from:]:
            if x > 0 and x + w > width:
                x, y = 0.0, y + h + GAP
            rects.append(QRectF(x, y, min(w, width), h))
            x += w + GAP
        self._rects = rects
        self._height = int((rects[-1].bottom() if rects else h)) + 2
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(400, getattr(self, "_height", 24))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(100, getattr(self, "_height", 24))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._relayout()

    def changeEvent(self, event) -> None:  # noqa: N802 - a new font re-measures every chip
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._relayout()

    # -- painting --------------------------------------------------------------------------
    def paintEvent(self, _event) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        base, text, mid = pal.color(QPalette.ColorRole.AlternateBase), pal.color(QPalette.ColorRole.Text), pal.color(QPalette.ColorRole.Mid)
        if self._hidden:
            fm = QFontMetrics(self.font())
            label = f"… {self._hidden} earlier tokens"
            r = QRectF(0, 0, fm.horizontalAdvance(label) + 2 * PAD_X, fm.height() + 2 * PAD_Y)
            p.setPen(mid)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, label)
        # Alphas for the drawn chips in one numpy step (per-chip numpy scalars cost ~10 µs each).
        alphas = []
        if self._weights is not None:
            shown = self._weights[self._hidden:len(self._labels)]
            alphas = (0.12 + 0.88 * np.sqrt(np.clip(shown, 0.0, 1.0))).tolist()  # sqrt: small weights stay visible
        for i in range(self._hidden, len(self._labels)):
            r = self._rects[i]
            fill = QColor(base)
            if i - self._hidden < len(alphas):
                fill = QColor(TINT)
                fill.setAlphaF(alphas[i - self._hidden])
            p.setBrush(fill)
            p.setPen(QPen(FOCUS, 2) if i == self._focus else QPen(mid, 1))
            p.drawRoundedRect(r.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
            p.setPen(text)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, self._labels[i])
        p.end()

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        pos = event.position()
        hit = next((i for i in range(self._hidden, len(self._rects)) if self._rects[i].contains(pos)), -1)
        self.tokenHovered.emit(hit)
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        self.tokenHovered.emit(-1)
        super().leaveEvent(event)
