"""The Features panel's prompt: the box, its tokens as chips shaded by the selected feature's
activation (live while typing), and for a clicked token the features that fire on it most."""
from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from explorer.views.features.contexts import NEGATIVE, POSITIVE
from explorer.widgets.prompt_box import PromptBox
from explorer.widgets.token_chips import FOCUS, TokenChips
from explorer.widgets.token_stream import visible_token

TOKEN_HINT = "Click a token for the features that fire on it most."


class FeatureChips(TokenChips):
    """Token chips shaded by a signed activation (none at exactly zero, unlike attention chips,
    whose faintest weight still tints), that say which chip was clicked."""

    tokenClicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, max_lines: int = 4):
        super().__init__(parent, max_lines=max_lines)
        self.acts: np.ndarray | None = None
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def set_activations(self, acts: np.ndarray | None, focus: int = -1) -> None:
        self.acts = None if acts is None else np.asarray(acts, dtype=float).reshape(-1)
        self.set_weights(None, focus)

    def fill(self, i: int) -> QColor | None:
        """Chip i's shade; None when its activation is zero, missing or unknown."""
        acts = self.acts
        if acts is None or i >= len(acts) or not np.isfinite(acts[i]) or acts[i] == 0:
            return None
        finite = np.abs(acts[np.isfinite(acts)])
        colour = QColor(*(POSITIVE if acts[i] > 0 else NEGATIVE))
        colour.setAlphaF(float(0.15 + 0.85 * min(abs(acts[i]) / finite.max(), 1.0)))
        return colour

    def chip_rect(self, i: int) -> QRectF | None:
        """Where chip i is drawn (None: not drawn, in the hidden head of a long prompt)."""
        return self._rects[i] if 0 <= i < len(self._rects) else None

    def index_at(self, pos: QPointF) -> int:
        """The chip under `pos` (widget coordinates), -1 for none."""
        rects = self._rects  # TokenChips' layout: None for the hidden head of a long prompt
        return next((i for i, r in enumerate(rects) if r is not None and r.contains(pos)), -1)

    def mousePressEvent(self, event) -> None:  # noqa: N802
        hit = self.index_at(event.position())
        if hit >= 0 and event.button() == Qt.MouseButton.LeftButton:
            self.tokenClicked.emit(hit)
        super().mousePressEvent(event)

    def paintEvent(self, event) -> None:  # noqa: N802
        if self.acts is None:
            super().paintEvent(event)
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        base, text, mid = (pal.color(QPalette.ColorRole.AlternateBase), pal.color(QPalette.ColorRole.Text),
                           pal.color(QPalette.ColorRole.Mid))
        if self._hidden:  # the head of a long prompt that did not fit, as TokenChips says it
            label = f"… {self._hidden} earlier tokens"
            p.setPen(mid)
            p.drawText(QRectF(0, 0, self.fontMetrics().horizontalAdvance(label) + 10, self.fontMetrics().height() + 4),
                       Qt.AlignmentFlag.AlignCenter, label)
        for i, (r, label) in enumerate(zip(self._rects, self.labels)):
            if r is None:
                continue
            fill = self.fill(i)
            p.setBrush(fill if fill is not None else base)
            p.setPen(QPen(FOCUS, 2) if i == self._focus else QPen(mid, 1))
            p.drawRoundedRect(r.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
            p.setPen(QColor("#1b1b1b") if fill is not None and fill.alphaF() > 0.45 else text)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, label)
        p.end()


class PromptArea(QWidget):
    """Out: `promptChanged(text)`, `tokenClicked(position)`, `featureClicked(id)`."""

    promptChanged = Signal(str)
    tokenClicked = Signal(int)
    featureClicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.prompt = PromptBox("Type a prompt: its tokens light up where the selected feature fires.", 48)
        self.prompt.edited.connect(self.promptChanged)
        self.chips = FeatureChips()
        self.chips.tokenClicked.connect(self.tokenClicked)
        self.token_features = QLabel(TOKEN_HINT)
        self.token_features.setWordWrap(True)
        self.token_features.setTextFormat(Qt.TextFormat.RichText)
        self.token_features.linkActivated.connect(self._on_link)
        self.tokens: list[str] = []
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        box.addWidget(self.prompt)
        box.addWidget(self.chips)
        box.addWidget(self.token_features)

    def set_activations(self, tokens: list[str], acts) -> None:
        if acts is not None and len(acts) != len(tokens):
            raise ValueError(f"{len(tokens)} prompt tokens but {len(acts)} activations; they must pair up")
        if list(tokens) != self.tokens:
            self.token_features.setText(TOKEN_HINT)  # another prompt: the clicked token's list is gone
        self.tokens = list(tokens)
        self.chips.set_tokens(list(tokens))
        self.chips.set_activations(acts)

    def set_token_features(self, position: int, token: str, features) -> None:
        """`features`: (feature id, activation, label) rows, strongest first; each id is a link."""
        self.chips.set_activations(self.chips.acts, focus=position)
        head = f"<b>{html.escape(visible_token(token))}</b> (position {position}):"
        if not features:
            self.token_features.setText(f"{head} no feature fires here.")
            return
        links = [f"<a href=\"feature:{int(f)}\">#{int(f)}</a> {float(a):.2f} {html.escape(str(label))}"
                 for f, a, label in features]
        self.token_features.setText(head + " " + " · ".join(links))

    def clear(self) -> None:
        self.tokens = []
        self.chips.set_tokens([])
        self.chips.set_activations(None)
        self.token_features.setText(TOKEN_HINT)

    def _on_link(self, href: str) -> None:
        kind, _, value = href.partition(":")
        if kind == "feature" and value.lstrip("-").isdigit():
            self.featureClicked.emit(int(value))
